"""Client channels for calls inside the mesh: internal token, tracing, message limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

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

    async def _call(self, continuation: Callable, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self._token), request)


# grpc.aio files each interceptor under the first call type it matches, so one class that
# implemented all four would only ever see unary-unary calls.
class _UnaryUnaryToken(_TokenInterceptor, grpc.aio.UnaryUnaryClientInterceptor):
    intercept_unary_unary = _TokenInterceptor._call


class _UnaryStreamToken(_TokenInterceptor, grpc.aio.UnaryStreamClientInterceptor):
    intercept_unary_stream = _TokenInterceptor._call


class _StreamUnaryToken(_TokenInterceptor, grpc.aio.StreamUnaryClientInterceptor):
    intercept_stream_unary = _TokenInterceptor._call


class _StreamStreamToken(_TokenInterceptor, grpc.aio.StreamStreamClientInterceptor):
    intercept_stream_stream = _TokenInterceptor._call


def internal_channel(
    address: str, token: str | None, max_message_bytes: int = 256 * 1024 * 1024
) -> grpc.aio.Channel:
    interceptors: list[Any] = list(client_tracing_interceptors())
    if token:
        interceptors.extend(
            kind(token)
            for kind in (_UnaryUnaryToken, _UnaryStreamToken, _StreamUnaryToken, _StreamStreamToken)
        )
    return grpc.aio.insecure_channel(
        address, options=message_options(max_message_bytes), interceptors=interceptors
    )
