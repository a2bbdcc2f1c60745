"""Gateway process wiring: tenancy, the scheduler link, and the public gRPC server."""

from __future__ import annotations

import ipaddress
import logging
import time
from dataclasses import dataclass

from mediamesh.common.channels import internal_channel
from mediamesh.common.registry import Registry
from mediamesh.common.server import RunningServer, start_server
from mediamesh.common.settings import ConfigError, MeshConfig
from mediamesh.gateway.api import kserve, servicer
from mediamesh.gateway.api.upstream import Upstream
from mediamesh.gateway.core.tenancy import Tenancy

log = logging.getLogger("mediamesh.gateway")


class InsecureBindError(ConfigError):
    """No API keys on a non-loopback address without --insecure."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class GatewayService:
    server: RunningServer
    channel: object

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_s: float = 2.0) -> None:
        await self.server.stop(grace_s)
        await self.channel.close()  # type: ignore[attr-defined]


async def start_gateway(config: MeshConfig, registry: Registry) -> GatewayService:
    g = config.gateway
    tenancy = Tenancy(g, time.monotonic)
    if tenancy.open:
        if not is_loopback(g.host) and not g.insecure:
            raise InsecureBindError(
                f"gateway.host {g.host} is not loopback and no gateway.api_keys are configured; "
                "configure API keys or pass --insecure to serve without authentication"
            )
        log.warning("no API keys configured: the gateway on %s is OPEN to every caller", g.host)
    channel = internal_channel(
        g.scheduler_address, config.internal_auth.resolve(), g.max_message_bytes
    )
    upstream = Upstream.over(
        channel,
        registry,
        tenancy,
        g.inline_result_limit_bytes,
        g.max_message_bytes,
    )
    registrations = [servicer.registration(upstream), kserve.registration(upstream)]
    server = await start_server(
        registrations,
        host=g.host,
        port=g.port,
        max_message_bytes=g.max_message_bytes,
        tls=g.tls,
    )
    log.info("gateway serving on %s:%d", g.host, server.port)
    return GatewayService(server, channel)
