"""Client channels for calls inside the mesh: internal token, tracing, message limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from services.common.interceptors import INTERNAL_TOKEN_KEY
from services.common.server import message_options
from services.common.telemetry import client_tracing_interceptors


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add(INTERNAL_TOKEN_KEY, token)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _TokenInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    def __init__(self, token: str) -> None:
        self._token = token

    async def _call(self, continuation: Callable, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self._token), request)

    intercept_unary_unary = _call
    intercept_unary_stream = _call
    intercept_stream_unary = _call
    intercept_stream_stream = _call


def internal_channel(
    address: str, token: str | None, max_message_bytes: int = 256 * 1024 * 1024
) -> grpc.aio.Channel:
    interceptors: list[Any] = list(client_tracing_interceptors())
    if token:
        interceptors.append(_TokenInterceptor(token))
    return grpc.aio.insecure_channel(
        address, options=message_options(max_message_bytes), interceptors=interceptors
    )
