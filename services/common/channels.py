"""Client channels for calls inside the mesh: internal credential, tracing, message limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.server import message_options
from mediamesh.common.telemetry import client_tracing_interceptors


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add(INTERNAL_TOKEN_KEY, token)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _TokenInterceptor:
    def __init__(self, token: str) -> None:
        self._token = token

    async def _call(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return await continuation(_with_token(client_call_details, self._token), request)

    # The same call, under the parameter name the client-streaming interceptors declare.
    async def _call_streaming(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await self._call(continuation, client_call_details, request_iterator)


# grpc.aio files each interceptor under the first call type it matches, so one class that
# implemented all four would only ever see unary-unary calls.
class _UnaryUnaryToken(_TokenInterceptor, grpc.aio.UnaryUnaryClientInterceptor):
    intercept_unary_unary = _TokenInterceptor._call


class _UnaryStreamToken(_TokenInterceptor, grpc.aio.UnaryStreamClientInterceptor):
    intercept_unary_stream = _TokenInterceptor._call


class _StreamUnaryToken(_TokenInterceptor, grpc.aio.StreamUnaryClientInterceptor):
    intercept_stream_unary = _TokenInterceptor._call_streaming


class _StreamStreamToken(_TokenInterceptor, grpc.aio.StreamStreamClientInterceptor):
    intercept_stream_stream = _TokenInterceptor._call_streaming


def internal_channel(
    address: str, credentials: InternalCredentials, max_message_bytes: int = 256 * 1024 * 1024
) -> grpc.aio.Channel:
    """A channel to an internal server carrying the mesh's credential (token, TLS, mTLS)."""
    interceptors: list[Any] = list(client_tracing_interceptors())
    token = credentials.token
    if token:
        interceptors.extend(
            kind(token)
            for kind in (_UnaryUnaryToken, _UnaryStreamToken, _StreamUnaryToken, _StreamStreamToken)
        )
    return credentials.aio_channel(
        address, options=message_options(max_message_bytes), interceptors=interceptors
    )
