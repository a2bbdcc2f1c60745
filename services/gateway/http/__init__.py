"""The gateway's HTTP/JSON face: FastAPI on uvicorn, in the gateway process, over the same
DataPlane as the gRPC servicers (tenancy, quotas, validation, scheduler calls)."""
