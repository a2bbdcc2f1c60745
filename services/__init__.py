"""mediamesh: an async gRPC mesh serving diffusion models, and its Python SDK.

`from mediamesh import Client, AsyncClient, GatewayError` (and the event types) loads the SDK
(grpc and the stubs) on first use only, so that importing a service or the CLI does not pay
for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mediamesh.sdk import (
        AsyncClient,
        Client,
        Error,
        Event,
        EventLoopError,
        GatewayError,
        Notice,
        Progress,
        Queued,
        Result,
    )

__all__ = [
    "AsyncClient",
    "Client",
    "Error",
    "Event",
    "EventLoopError",
    "GatewayError",
    "Notice",
    "Progress",
    "Queued",
    "Result",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mediamesh import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'mediamesh' has no attribute {name!r}")
