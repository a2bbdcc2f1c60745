"""The standard gRPC health and reflection services: served by every mesh server, asked by
`mediamesh up` and `mediamesh healthcheck`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from mediamesh.common.credentials import InternalCredentials

__all__ = [
    "HEALTH_SERVICE",
    "LIVENESS_SERVICE",
    "HealthServicer",
    "add_health_and_reflection",
    "add_health_only",
    "answers_serving",
    "is_serving",
    "mark_alive",
    "mark_serving",
    "serving_status",
]

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# The health name for liveness probes: SERVING while the process runs. The server as a whole
# ("") is for readiness and turns NOT_SERVING when it should get no work (a draining worker,
# a gateway without its scheduler); a liveness probe on it would restart such a process.
LIVENESS_SERVICE = "liveness"


def add_health_and_reflection(
    server: grpc.aio.Server, service_names: Iterable[str]
) -> HealthServicer:
    """Adds grpc.health.v1.Health and reflection over `service_names`, health and
    reflection themselves; the returned servicer reports NOT_SERVING until `mark_serving`."""
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    add_reflection(
        server,
        (*service_names, HEALTH_SERVICE, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE),
    )
    return health


# The stable name of the reflection protocol. grpcio-reflection serves only v1alpha, whose
# messages v1 kept field for field, so the same servicer answers both names; newer tools
# (grpcurl from 1.9, grpcui, Postman) ask v1 first, older ones only v1alpha.
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"


class _ReflectionServicer(reflection.aio.ReflectionServicer):
    """grpcio-reflection's servicer, which also finds the file of a method. It asks
    protobuf's descriptor pool, whose upb implementation finds types, fields, services and
    enum values by name but not methods, so `grpcurl describe mediamesh.v1.Gateway.Submit`
    answered NOT_FOUND."""

    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        service, _, method = fully_qualified_name.rpartition(".")
        if service and _has_method(service, method):
            # A method is declared in its service's file.
            fully_qualified_name = service
        # A private hook of grpcio-reflection's base class, which its stubs leave out.
        return super()._file_containing_symbol(request, fully_qualified_name)  # type: ignore[misc]


def _has_method(service: str, method: str) -> bool:
    # The default pool: the one the servicer answers from when given none.
    pool = descriptor_pool.Default()  # type: ignore[no-untyped-call]
    try:
        return method in pool.FindServiceByName(service).methods_by_name
    except KeyError:
        return False


def _describe_reflection_v1() -> None:
    """Puts grpc/reflection/v1/reflection.proto in the default descriptor pool, built from
    v1alpha's (v1 kept every message and field): reflection can then list v1 and describe
    it, which grpcurl needs before it calls the service by that name."""
    pool = descriptor_pool.Default()  # type: ignore[no-untyped-call]
    try:
        pool.FindServiceByName(REFLECTION_V1_SERVICE)
        return
    except KeyError:
        pass
    alpha = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(alpha)  # type: ignore[no-untyped-call]
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    alpha.name = "grpc/reflection/v1/reflection.proto"
    alpha.package = "grpc.reflection.v1"
    alpha.ClearField("options")
    for message in alpha.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new)
    for service in alpha.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    pool.AddSerializedFile(alpha.SerializeToString())


def add_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Reflection over `service_names`, as grpc.reflection.v1alpha and as v1."""
    _describe_reflection_v1()
    servicer = _ReflectionServicer(tuple(service_names))
    # grpcio-reflection's generated module has no type hints.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1_SERVICE, {"ServerReflectionInfo": v1}),)
    )


def add_health_only(server: grpc.aio.Server, health: HealthServicer) -> None:
    """Adds `health`, already serving on another server, to `server`: both report alike."""
    health_pb2_grpc.add_HealthServicer_to_server(health, server)


async def mark_serving(
    health: HealthServicer, service_names: Iterable[str], serving: bool = True
) -> None:
    """SERVING (or NOT_SERVING) for the server as a whole ("") and for each named service.
    After `enter_graceful_shutdown` the servicer ignores this and stays NOT_SERVING."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", *service_names):
        await health.set(name, status)


async def mark_alive(health: HealthServicer) -> None:
    """SERVING for LIVENESS_SERVICE, for good: only shutting down changes it."""
    await health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)


async def answers_serving(
    channel: grpc.aio.Channel,
    timeout: float,
    service: str = "",
    metadata: tuple[tuple[str, str], ...] = (),
    on_error: Callable[[grpc.aio.AioRpcError], None] | None = None,
) -> bool:
    """Whether the server behind `channel` reports SERVING for `service` within `timeout`
    seconds; False when it reports otherwise or does not answer (`on_error` hears why,
    when the call itself failed)."""
    try:
        # typeshed's HealthStub declares no rpc methods; the generated class has them.
        reply = await health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
            health_pb2.HealthCheckRequest(service=service),
            timeout=timeout,
            wait_for_ready=True,
            metadata=metadata or None,
        )
    except grpc.aio.AioRpcError as exc:
        if on_error is not None:
            on_error(exc)
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def serving_status(
    address: str,
    service: str = "",
    timeout: float = 1.0,
    credentials: InternalCredentials | None = None,
) -> str:
    """The health status name ("SERVING", "NOT_SERVING", ...) of `service` at `address`, over
    the internal credential's TLS when given (else plaintext); raises grpc.RpcError when the
    server does not answer."""
    with (credentials or InternalCredentials()).blocking_channel(address) as channel:
        # typeshed's HealthStub declares no rpc methods; the generated class has them.
        reply = health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
            health_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def is_serving(
    address: str, timeout: float = 1.0, credentials: InternalCredentials | None = None
) -> bool:
    """Whether the server at `address` answers SERVING; False when it does not answer."""
    try:
        return serving_status(address, timeout=timeout, credentials=credentials) == "SERVING"
    except grpc.RpcError:
        return False
