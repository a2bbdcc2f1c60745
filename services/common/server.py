"""Start a grpc.aio server with health, reflection and the common interceptors."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from mediamesh.common.api.health import (
    HealthServicer,
    add_health_and_reflection,
    add_health_only,
    mark_alive,
    mark_serving,
)
from mediamesh.common.interceptors import (
    CallerGate,
    CredentialCheck,
    ServiceInterceptor,
)
from mediamesh.common.listeners import ListenError, refuse_taken
from mediamesh.common.secret_files import read_key_pair
from mediamesh.common.settings import TlsSettings
from mediamesh.common.telemetry import server_tracing_interceptors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registration:
    """A servicer to add, and the full service names it answers for."""

    service_names: tuple[str, ...]
    add: Callable[[grpc.aio.Server], None]
    # A public API's credential check, run on a call's metadata before its request is read
    # (`CallerGate`); it raises MeshError to refuse the call. None: the servicer
    # checks for itself (internal services: the internal token is checked for every one).
    authenticate: CredentialCheck | None = None
    # Methods ("service/method") that need no credential and are never refused for being
    # busy (a liveness probe's).
    open_methods: frozenset[str] = frozenset()


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: HealthServicer
    service_names: tuple[str, ...]
    # The plaintext health-only server, when one was asked for.
    health_server: grpc.aio.Server | None = None
    health_port: int | None = None

    async def set_serving(self, serving: bool) -> None:
        """What health checks answer from now on (readiness: whether to send work here)."""
        await mark_serving(self.health, self.service_names, serving)

    async def stop(self, grace_s: float) -> None:
        await self.health.enter_graceful_shutdown()
        if self.health_server is not None:
            await self.health_server.stop(0)
        await self.server.stop(grace_s)


def message_options(max_bytes: int, max_receive_bytes: int | None = None) -> list[tuple[str, int]]:
    """The largest message sent and received (`max_receive_bytes`, when given, received)."""
    return [
        ("grpc.max_receive_message_length", max_receive_bytes or max_bytes),
        ("grpc.max_send_message_length", max_bytes),
    ]


# Clients keep long, quiet streams alive with pings (the SDK every 60 s, while a job waits in
# a queue). By default a server allows one ping per 5 minutes without data and answers more
# with GOAWAY "too_many_pings", which would end those streams.
KEEPALIVE_OPTIONS = [("grpc.http2.min_ping_interval_without_data_ms", 20_000)]


def public_tls(tls: TlsSettings | None) -> grpc.ServerCredentials | None:
    """Server-side TLS for a public listener (the gateway's), None when not configured.
    ConfigError naming `gateway.tls.cert_file` or `key_file` when a file cannot be read or
    the pair is unusable: gRPC would only say that it could not bind the port."""
    if tls is None or not tls.enabled:
        return None
    assert tls.cert_file is not None and tls.key_file is not None
    cert, key = read_key_pair(
        tls.cert_file, tls.key_file, "gateway.tls.cert_file", "gateway.tls.key_file"
    )
    return grpc.ssl_server_credentials([(key, cert)])


async def start_server(
    registrations: Sequence[Registration],
    *,
    host: str,
    port: int,
    max_message_bytes: int,
    internal_token: str | None = None,
    credentials: grpc.ServerCredentials | None = None,
    health_port: int | None = None,
    serving: bool = True,
    max_receive_bytes: int | None = None,
    max_concurrent_rpcs: int | None = None,
    max_streams_per_connection: int | None = None,
) -> RunningServer:
    """Serves `registrations` on host:port, over TLS when `credentials` are given, demanding
    `internal_token` when set, and each registration's own `authenticate` before a request
    to it is read; `health_port` adds a plaintext listener with health only. `serving`
    False starts it NOT_SERVING (a worker still warming up). A public listener bounds what
    callers may make it hold: `max_receive_bytes` (the largest request message, else
    `max_message_bytes`), `max_concurrent_rpcs` (calls to the registrations at once,
    streams included; more are refused RESOURCE_EXHAUSTED before their request is read,
    while health still answers) and `max_streams_per_connection` (HTTP/2 streams one
    connection may open; more wait). ListenError, naming the bare setting (`port`,
    `health_port`), when either cannot be bound."""
    checks = {
        name: registration.authenticate
        for registration in registrations
        for name in registration.service_names
    }
    callers: CallerGate | None = None
    if max_concurrent_rpcs is not None or any(checks.values()):
        open_methods = frozenset().union(*(r.open_methods for r in registrations))
        callers = CallerGate(checks, open_methods, max_concurrent_rpcs)
    interceptors: list[grpc.aio.ServerInterceptor] = [
        *server_tracing_interceptors(),
        ServiceInterceptor(internal_token, callers),
    ]
    options: list[tuple[str, int]] = [
        *message_options(max_message_bytes, max_receive_bytes),
        *KEEPALIVE_OPTIONS,
        ("grpc.so_reuseport", 0),
    ]
    if max_streams_per_connection is not None:
        options.append(("grpc.max_concurrent_streams", max_streams_per_connection))
        # By default gRPC counts a stream against that limit until the server has freed it,
        # which lags its end, and refuses a new stream while the count is over
        # (RST_STREAM REFUSED_STREAM: UNAVAILABLE to the caller). A client opens one as soon
        # as another ends, so callers past the limit failed instead of waiting their turn.
        options.append(("grpc.http.overload_protection", 0))
    server = grpc.aio.server(interceptors=interceptors, options=options)
    names: list[str] = []
    for registration in registrations:
        registration.add(server)
        names.extend(registration.service_names)
    health = add_health_and_reflection(server, names)
    bound = _add_port(server, "port", host, port, credentials)
    health_server, health_bound = None, None
    if health_port is not None:
        health_server, health_bound = _health_only_server(health, host, health_port)
        await health_server.start()
    await server.start()
    await mark_serving(health, names, serving)
    await mark_alive(health)
    return RunningServer(server, bound, health, tuple(names), health_server, health_bound)


def _health_only_server(
    health: HealthServicer, host: str, port: int
) -> tuple[grpc.aio.Server, int]:
    """A plaintext listener sharing the main server's health state, for probes that cannot
    do TLS (the kubelet's gRPC probe): health says nothing a caller could misuse."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    add_health_only(server, health)
    return server, _add_port(server, "health_port", host, port, None)


def _add_port(
    server: grpc.aio.Server,
    setting: str,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None,
) -> int:
    """Adds the listener on host:port; its bound port (a free one for 0)."""
    refuse_taken(setting, host, port)
    address = f"{host}:{port}"
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        # Taken since refuse_taken looked, or refused for a reason only gRPC's log gives.
        bound = 0
    if bound == 0:
        raise ListenError(setting, host, port, "gRPC could not bind it; its log says why")
    return bound


def stop_event_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT, so `main` can shut down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
