"""Gateway process wiring: tenancy, the scheduler link, the public gRPC server and its HTTP
face."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from mediamesh.common.api.health import LIVENESS_SERVICE, answers_serving
from mediamesh.common.channels import internal_channel
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.exposure import InsecureBindError as InsecureBindError
from mediamesh.common.exposure import refuse_open_off_loopback
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.registry import Registry
from mediamesh.common.server import RunningServer, public_tls, start_server
from mediamesh.common.settings import GatewayHttpSettings, MeshConfig
from mediamesh.gateway.api import kserve, servicer
from mediamesh.gateway.api.dataplane import DataPlane
from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.api.upstream import Upstream
from mediamesh.gateway.core.tenancy import Tenancy
from mediamesh.gateway.http.app import create_app
from mediamesh.gateway.http.result_links import ResultLinks
from mediamesh.gateway.http.server import HttpServer, start_http
from mediamesh.gateway.scheduler_watch import SchedulerWatch

log = logging.getLogger("mediamesh.gateway")


@dataclass
class GatewayService:
    server: RunningServer
    channel: object
    watch: SchedulerWatch
    _watch_task: asyncio.Task[None]
    # The HTTP/JSON face; None when gateway.http_port is None.
    http: HttpServer | None = None
    # What stop() gives in-flight calls and streams when not told otherwise
    # (gateway.shutdown_grace_s).
    shutdown_grace_s: float = 20.0
    # Its JobLink stream is closed once the listeners have stopped.
    upstream: Upstream | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def http_port(self) -> int | None:
        """The HTTP face's bound port, if it serves."""
        return self.http.port if self.http is not None else None

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting and give in-flight calls and streams `grace_s` (default:
        gateway.shutdown_grace_s) to finish, on the gRPC and HTTP listeners at once, so the
        whole stop takes one grace period, not one per listener."""
        grace = self.shutdown_grace_s if grace_s is None else grace_s
        self._watch_task.cancel()
        stops = [self.server.stop(grace)]
        if self.http is not None:
            stops.append(self.http.stop(grace))
        await asyncio.gather(*stops)
        if self.upstream is not None:
            await self.upstream.aclose()
        await self.channel.close()  # type: ignore[attr-defined]


def result_links(http: GatewayHttpSettings) -> ResultLinks:
    """The signer of keyless result links: the configured secret, else one of this process."""
    secret = http.result_link_secret
    key = secret.get_secret_value().encode() if secret is not None else secrets.token_bytes(32)
    return ResultLinks(key, http.result_link_ttl_s)


async def start_gateway(
    config: MeshConfig,
    registry: Registry,
    *,
    after_exposure_check: Callable[[], None] | None = None,
) -> GatewayService:
    """Start the gateway; `after_exposure_check` runs once the fail-closed check and the TLS
    files passed, before anything binds (the process opens its metrics listener there)."""
    g = config.gateway
    tenancy = Tenancy(g, time.monotonic)
    refuse_open_off_loopback(
        service="gateway",
        host=g.host,
        authenticated=not tenancy.open,
        insecure=g.insecure,
        missing="no gateway.api_keys are configured",
    )
    # Every credential file is checked before anything binds: one that cannot be used is a
    # one-line refusal, not a port gRPC "could not bind".
    tls = public_tls(g.tls)
    internal = InternalCredentials.from_config(config)
    if after_exposure_check is not None:
        after_exposure_check()
    channel = internal_channel(g.scheduler_address, internal, g.max_message_bytes)
    upstream = Upstream.over(
        channel,
        registry,
        tenancy,
        g.inline_result_limit_bytes,
        g.max_message_bytes,
        g.max_adapters_per_request,
    )
    registrations = [servicer.registration(upstream), kserve.registration(upstream)]
    server = await start_server(
        registrations,
        host=g.host,
        port=g.port,
        max_message_bytes=g.max_message_bytes,
        credentials=tls,
        max_receive_bytes=g.max_request_bytes,
        max_concurrent_rpcs=g.max_concurrent_rpcs,
        max_streams_per_connection=g.max_streams_per_connection,
    )
    # A gateway without a token still presents one, empty, to its readiness probe: Health is
    # open only to callers that send none, so a scheduler that wants a token refuses it, and
    # the gateway turns NOT_SERVING instead of passing its probe while every call fails.
    probe_metadata = () if internal.token else ((INTERNAL_TOKEN_KEY, ""),)

    # The scheduler's liveness, not its readiness: a scheduler whose job store takes no
    # writes is NOT_SERVING, and there is no other one to send callers to; a gateway that
    # left rotation then would take reads and the scheduler's own UNAVAILABLE answer
    # ("the job store …") away from every caller.
    async def probe(timeout: float) -> bool:
        errors: list[grpc.aio.AioRpcError] = []
        answered = await answers_serving(
            channel,
            timeout,
            service=LIVENESS_SERVICE,
            metadata=probe_metadata,
            on_error=errors.append,
        )
        upstream.heard_from_probe(errors[0] if errors else None)
        return answered

    watch = SchedulerWatch(probe, server.set_serving, g.scheduler_lost_after_s)
    upstream.scheduler_lost = lambda: not watch.serving
    watch_task = asyncio.create_task(watch.run(), name="scheduler-watch")
    log.info("gateway serving on %s:%d", g.host, server.port)
    service = GatewayService(
        server, channel, watch, watch_task, shutdown_grace_s=g.shutdown_grace_s, upstream=upstream
    )
    if g.http_port is not None:
        # Same host, keys and TLS as the gRPC listener, so the fail-closed check above
        # covers it too.
        try:
            service.http = await start_http(
                create_app(
                    JsonPlane(DataPlane(upstream)),
                    ready=lambda: watch.serving,
                    max_body_bytes=g.max_message_bytes,
                    cors_origins=g.http.cors_origins,
                    public_url=g.http.public_url,
                    result_links=result_links(g.http),
                ),
                g.host,
                g.http_port,
                g.tls,
                g.http,
            )
        except BaseException:
            await service.stop(0)
            raise
    return service
