"""Small synchronous clients the CLI uses to look at a running mesh."""

from __future__ import annotations

import grpc

from mediamesh.common.generated.v1 import scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.settings import MeshConfig


def _metadata(config: MeshConfig) -> list[tuple[str, str]]:
    token = config.internal_auth.resolve()
    return [(INTERNAL_TOKEN_KEY, token)] if token else []


def mesh_status(config: MeshConfig, address: str | None = None) -> scheduler_pb2.MeshStatus:
    s = config.scheduler
    with grpc.insecure_channel(address or f"{s.host}:{s.port}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        return stub.GetStatus(
            scheduler_pb2.GetStatusRequest(), timeout=5, metadata=_metadata(config)
        )


def registered_workers(config: MeshConfig) -> set[str]:
    try:
        status = mesh_status(config)
    except grpc.RpcError:
        return set()
    return {w.worker_id for w in status.workers}
