"""Client channels for calls inside the mesh: internal credential, tracing, message limits."""

from __future__ import annotations

from typing import Any

import grpc

from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.server import message_options
from mediamesh.common.telemetry import client_tracing_interceptors


class _WithToken:
    """A multicallable that adds the internal token to each call's metadata."""

    def __init__(self, inner: Any, token: str) -> None:
        self._inner = inner
        self._token = token

    def __call__(self, request: Any = None, *, metadata: Any = None, **kwargs: Any) -> Any:
        metadata = (*(metadata or ()), (INTERNAL_TOKEN_KEY, self._token))
        if request is None:  # client-streaming calls may start without an iterator
            return self._inner(metadata=metadata, **kwargs)
        return self._inner(request, metadata=metadata, **kwargs)


class TokenChannel(grpc.aio.Channel):
    """A channel whose every call carries the internal token.

    It adds the token where each call starts instead of through a client interceptor:
    grpc.aio runs an intercepted call's responses through an extra task and queue, which
    took a tenth of the scheduler's time reading its workers' per-step event streams."""

    def __init__(self, inner: grpc.aio.Channel, token: str) -> None:
        self._inner = inner
        self._token = token

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._inner.unary_unary(*args, **kwargs), self._token)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._inner.unary_stream(*args, **kwargs), self._token)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._inner.stream_unary(*args, **kwargs), self._token)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._inner.stream_stream(*args, **kwargs), self._token)

    async def close(self, grace: float | None = None) -> None:
        await self._inner.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._inner.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._inner.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._inner.channel_ready()

    async def __aenter__(self) -> TokenChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(None)


# gRPC's default reconnect back-off (1 s, growing 1.6 times up to 120 s) let a gateway
# reach a restarted scheduler only at its channel's next attempt, seconds after the
# scheduler served again (2.4 to 5.6 s from a SIGKILL in the recovery bench, in steps of
# that schedule). Inside a mesh a connect attempt a second to a peer that is down costs
# nothing, and bounds that lag to about a second. The connect timeout
# (grpc.min_reconnect_backoff_ms, 20 s) stays: a handshake over a slow link still completes.
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def internal_channel(
    address: str, credentials: InternalCredentials, max_message_bytes: int = 256 * 1024 * 1024
) -> grpc.aio.Channel:
    """A channel to an internal server carrying the mesh's credential (token, TLS, mTLS)."""
    channel = credentials.aio_channel(
        address,
        options=[*message_options(max_message_bytes), *RECONNECT_OPTIONS],
        interceptors=list(client_tracing_interceptors()),
    )
    return TokenChannel(channel, credentials.token) if credentials.token else channel
