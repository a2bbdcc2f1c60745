"""Server interceptors: internal credential, metrics, and domain errors to status codes."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, cast

import grpc

from mediamesh.common.api.status import from_grpc, to_grpc
from mediamesh.common.errors import PUSHBACK_KEY, RETRY_AFTER_KEY, MeshError, StatusCode
from mediamesh.common.metrics import RPC_LATENCY, RPC_REQUESTS

log = logging.getLogger(__name__)

INTERNAL_TOKEN_KEY = "x-mediamesh-token"
# Probes and grpcurl must work without credentials.
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

# The interceptor serves every service, so requests and responses are of any message type.
# (Quoted: grpc's classes are generic only in their type stubs.)
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# typeshed types a handler's behaviours for the threaded server; under grpc.aio they are
# coroutine functions and async generators that take an aio ServicerContext.
_UnaryBehaviour: TypeAlias = "Callable[[Any, Context], Awaitable[Any]]"
_StreamBehaviour: TypeAlias = "Callable[[Any, Context], AsyncIterator[Any]]"


def _split(method: str) -> tuple[str, str]:
    _, service, name = method.split("/", 2) if method.count("/") >= 2 else ("", "", method)
    return service, name


async def _abort_for(exc: BaseException, context: Context) -> None:
    if isinstance(exc, MeshError):
        trailing: tuple[tuple[str, str], ...] = ()
        if exc.retry_after_s:
            wait_ms = str(int(exc.retry_after_s * 1000))
            trailing = ((RETRY_AFTER_KEY, wait_ms), (PUSHBACK_KEY, wait_ms))
        await context.abort(to_grpc(exc.code), exc.message, trailing)
    log.exception("unexpected error in %s", context)
    await context.abort(to_grpc(StatusCode.INTERNAL), "internal error; see the service log")


def _code_of(context: Context) -> StatusCode:
    return from_grpc(context.code())


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Checks the internal token (when set), records metrics and maps MeshError to status."""

    def __init__(self, internal_token: str | None = None) -> None:
        self._token = internal_token

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        service, name = _split(method)
        authorised = self._token is None or method.startswith(_OPEN_PREFIXES)
        if not authorised:
            sent = dict(details.invocation_metadata or ()).get(INTERNAL_TOKEN_KEY, "")
            authorised = hmac.compare_digest(str(sent), self._token or "")
        return _wrap(handler, service, name, authorised)


def _wrap(handler: Handler, service: str, name: str, authorised: bool) -> Handler:
    async def check(context: Context) -> None:
        if not authorised:
            await context.abort(
                to_grpc(StatusCode.UNAUTHENTICATED),
                f"missing or wrong {INTERNAL_TOKEN_KEY} metadata (internal service)",
            )

    def record(start: float, context: Context) -> None:
        RPC_REQUESTS.labels(service, name, _code_of(context)).inc()
        RPC_LATENCY.labels(service, name).observe(time.perf_counter() - start)

    if handler.unary_unary or handler.stream_unary:
        inner = cast(_UnaryBehaviour, handler.unary_unary or handler.stream_unary)

        async def unary(request: Any, context: Context) -> Any:
            start = time.perf_counter()
            try:
                await check(context)
                return await inner(request, context)
            except Exception as exc:
                if context.code() is None:
                    await _abort_for(exc, context)
                raise
            finally:
                record(start, context)

        factory = (
            grpc.unary_unary_rpc_method_handler
            if handler.unary_unary
            else grpc.stream_unary_rpc_method_handler
        )
        return factory(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    inner_stream = cast(_StreamBehaviour, handler.unary_stream or handler.stream_stream)

    async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
        start = time.perf_counter()
        try:
            await check(context)
            async for item in inner_stream(request, context):
                yield item
        except Exception as exc:
            if context.code() is None:
                await _abort_for(exc, context)
            raise
        finally:
            record(start, context)

    factory = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream
        else grpc.stream_stream_rpc_method_handler
    )
    return factory(
        streaming,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
