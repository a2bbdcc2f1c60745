"""Start a grpc.aio server with health, reflection and the common interceptors."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from mediamesh.common.api.health import HealthServicer, add_health_and_reflection, mark_serving
from mediamesh.common.interceptors import ServiceInterceptor
from mediamesh.common.settings import TlsSettings
from mediamesh.common.telemetry import server_tracing_interceptors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registration:
    """A servicer to add, and the full service names it answers for."""

    service_names: tuple[str, ...]
    add: Callable[[grpc.aio.Server], None]


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: HealthServicer
    service_names: tuple[str, ...]

    async def stop(self, grace_s: float) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


def message_options(max_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_bytes),
        ("grpc.max_send_message_length", max_bytes),
    ]


# Clients keep long, quiet streams alive with pings (the SDK every 60 s, while a job waits in
# a queue). By default a server allows one ping per 5 minutes without data and answers more
# with GOAWAY "too_many_pings", which would end those streams.
KEEPALIVE_OPTIONS = [("grpc.http2.min_ping_interval_without_data_ms", 20_000)]


async def start_server(
    registrations: Sequence[Registration],
    *,
    host: str,
    port: int,
    max_message_bytes: int,
    internal_token: str | None = None,
    tls: TlsSettings | None = None,
) -> RunningServer:
    server = grpc.aio.server(
        interceptors=[*server_tracing_interceptors(), ServiceInterceptor(internal_token)],
        options=[*message_options(max_message_bytes), *KEEPALIVE_OPTIONS, ("grpc.so_reuseport", 0)],
    )
    names: list[str] = []
    for registration in registrations:
        registration.add(server)
        names.extend(registration.service_names)
    health = add_health_and_reflection(server, names)
    address = f"{host}:{port}"
    if tls is not None and tls.enabled:
        assert tls.cert_file is not None and tls.key_file is not None
        credentials = grpc.ssl_server_credentials(
            [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())]
        )
        bound = server.add_secure_port(address, credentials)
    else:
        bound = server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot bind {address}")
    await server.start()
    await mark_serving(health, names)
    return RunningServer(server, bound, health, tuple(names))


def stop_event_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT, so `main` can shut down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
