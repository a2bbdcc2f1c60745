"""The standard gRPC health and reflection services: served by every mesh server, asked by
`mediamesh up` and `mediamesh healthcheck`."""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

__all__ = [
    "HEALTH_SERVICE",
    "HealthServicer",
    "add_health_and_reflection",
    "is_serving",
    "mark_serving",
    "serving_status",
]

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


def add_health_and_reflection(
    server: grpc.aio.Server, service_names: Iterable[str]
) -> HealthServicer:
    """Adds grpc.health.v1.Health and reflection over `service_names`, health and
    reflection themselves; the returned servicer reports NOT_SERVING until `mark_serving`."""
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (*service_names, HEALTH_SERVICE, reflection.SERVICE_NAME), server
    )
    return health


async def mark_serving(health: HealthServicer, service_names: Iterable[str]) -> None:
    """SERVING for the server as a whole ("") and for each named service."""
    for name in ("", *service_names):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)


def serving_status(address: str, service: str = "", timeout: float = 1.0) -> str:
    """The health status name ("SERVING", "NOT_SERVING", ...) of `service` at `address`
    over a plaintext channel; raises grpc.RpcError when the server does not answer."""
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def is_serving(address: str, timeout: float = 1.0) -> bool:
    """Whether the server at `address` answers SERVING; False when it does not answer."""
    try:
        return serving_status(address, timeout=timeout) == "SERVING"
    except grpc.RpcError:
        return False
