"""uvicorn serving the HTTP face on the gateway's own event loop (uvloop in the process).

The socket is bound here, not by uvicorn: a port in use is a StartupError that the gateway
command reports in one line, where uvicorn would exit the process. uvicorn's own signal
handlers stay off; the gateway process owns SIGTERM and stops this server itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from mediamesh.common.listeners import listening_socket
from mediamesh.common.settings import TlsSettings

log = logging.getLogger("mediamesh.gateway.http")


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The gateway's stop event handles the signals; uvicorn must not take them over.
        yield


@dataclass
class HttpServer:
    """A running HTTP listener."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    host: str
    port: int
    scheme: str

    @property
    def url(self) -> str:
        """The base URL clients use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    async def stop(self, grace_s: float = 2.0) -> None:
        """Stops accepting, gives open requests (event streams too) `grace_s`, then closes."""
        self.server.config.timeout_graceful_shutdown = max(int(grace_s), 1)
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, grace_s + 5)


async def start_http(app: FastAPI, host: str, port: int, tls: TlsSettings) -> HttpServer:
    """Binds `host:port` (0: a free port) and serves `app` there, with TLS when configured;
    ListenError (a StartupError) naming gateway.http_port when the port cannot be bound."""
    sock = listening_socket("http_port", host, port, section="gateway")
    sock.setblocking(False)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        ssl_certfile=str(tls.cert_file) if tls.enabled else None,
        ssl_keyfile=str(tls.key_file) if tls.enabled else None,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="gateway-http")
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the HTTP server stopped during start-up")
        await asyncio.sleep(0.01)
    bound = sock.getsockname()[1]
    scheme = "https" if tls.enabled else "http"
    log.info("gateway HTTP serving on %s://%s:%d", scheme, host, bound)
    return HttpServer(server, task, host, bound, scheme)
