"""uvicorn serving the HTTP face on the gateway's own event loop (uvloop in the process).

The socket is bound here, not by uvicorn: a port in use is a StartupError that the gateway
command reports in one line, where uvicorn would exit the process. uvicorn's own signal
handlers stay off; the gateway process owns SIGTERM and stops this server itself.

uvicorn bounds neither how long a client may take to send a request's head nor how many
connections it holds open (its `limit_concurrency` answers 503 to requests, once their head
has arrived, on connections it keeps): one client trickling bytes kept a connection for as
long as it liked, and enough half-sent requests used up the process's file descriptors,
which took the gRPC listener down with this one. `GuardedH11Protocol` closes a connection
whose request head is not complete within `gateway.http.header_timeout_s`, answers 408 to,
and closes, one whose request body goes `gateway.http.body_timeout_s` without a byte while
the gateway waits for it, and answers 503 to, and closes, each connection beyond
`gateway.http.max_connections`. With TLS, the handshake comes before any of that, and
uvicorn leaves it asyncio's default of 60 s; `_EmbeddedServer` gives it
`gateway.http.tls_handshake_timeout_s`. A public deployment still belongs behind a reverse
proxy or load balancer.

On stop, server-sent event streams end at once, cleanly (`EventStreamsEndOnStop`): a stream
of a queued job would otherwise outlast the grace, and uvicorn would cancel it with an ERROR
and a traceback. Their clients reconnect with `Last-Event-ID` and resume elsewhere; other
responses (downloads) keep the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from mediamesh.common.listeners import listening_socket
from mediamesh.common.log_throttle import LogThrottle
from mediamesh.common.settings import GatewayHttpSettings, TlsSettings

log = logging.getLogger("mediamesh.gateway.http")
# Refusals come in floods: one line a minute says so.
_refusal_log = LogThrottle()


# What a connection beyond gateway.http.max_connections is told before it is closed.
_FULL_BODY = (
    b'{"code":"UNAVAILABLE","message":"too many open connections '
    b'(gateway.http.max_connections); retry later"}'
)
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
) % (len(_FULL_BODY), _FULL_BODY)


# What a request whose body stalled is told before its connection is closed.
_STALLED_BODY = (
    b'{"code":"DEADLINE_EXCEEDED","message":"the request body stopped arriving '
    b'(gateway.http.body_timeout_s)"}'
)
_STALLED = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
) % (len(_STALLED_BODY), _STALLED_BODY)


class _BoundedHeadConnection(h11.Connection):
    """h11's connection, with the request head held to its limit however it arrived. h11
    checks `max_incomplete_event_size` only against a head still incomplete in its buffer:
    one that came whole in a single read (up to the socket's read size, 128 KiB and more)
    was never measured, so gateway.http.max_header_bytes did not hold."""

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes

    def next_event(self) -> Any:
        event = super().next_event()
        if isinstance(event, h11.Request) and _head_bytes(event) > self.max_head_bytes:
            raise h11.RemoteProtocolError(
                "request head over gateway.http.max_header_bytes", error_status_hint=431
            )
        return event


def _head_bytes(request: h11.Request) -> int:
    """The request head's size on the wire, as near as h11's parsed form tells: the request
    line and each `name: value` line with its CRLF, and the blank line."""
    line = len(request.method) + len(request.target) + len(b" HTTP/1.1\r\n") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers) + 2


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request head and a cap on the
    connections open at once (see the module's docstring). `for_settings` makes the class
    one server uses."""

    header_timeout_s: ClassVar[float] = 10.0
    body_timeout_s: ClassVar[float] = 30.0
    max_connections: ClassVar[int] = 1000
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    # When the connection last received bytes (or was last seen waiting on the gateway).
    _heard_at: float = 0.0

    @classmethod
    def for_settings(
        cls, max_connections: int, header_timeout_s: float, body_timeout_s: float = 30.0
    ) -> type[H11Protocol]:
        return type(
            cls.__name__,
            (cls,),
            {
                "max_connections": max_connections,
                "header_timeout_s": header_timeout_s,
                "body_timeout_s": body_timeout_s,
            },
        )

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        # start_http always sets the limit (gateway.http.max_header_bytes); without one, the
        # protocol's own h11 connection holds h11's default, which this keeps.
        limit = config.h11_max_incomplete_event_size
        self.conn = _BoundedHeadConnection(limit or self.conn._max_incomplete_event_size)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.max_connections:
            if _refusal_log.due():
                log.warning(
                    "refusing HTTP connections: %d are open (gateway.http.max_connections); "
                    "logged at most once every %.0f s",
                    self.max_connections,
                    _refusal_log.every_s,
                )
            self.transport.write(_FULL)
            self.transport.close()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            # The first bytes of the next request on a kept-alive connection.
            self._await_head()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_read()
        # One timer per body rather than one per chunk: it checks, when it fires, whether a
        # byte came since, and waits out the rest of the window if one did.
        self._heard_at = self.loop.time()
        if self._body_timer is None and self.conn.their_state is h11.SEND_BODY:
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_read()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._head_read()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _head_read(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            # No response: the client may have sent nothing yet (a browser's preconnect).
            self.transport.close()

    def _body_late(self) -> None:
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # The gateway stopped reading (the app has not taken what came): not the client.
            self._heard_at = now
        quiet = now - self._heard_at
        if quiet < self.body_timeout_s:
            self._body_timer = self.loop.call_later(self.body_timeout_s - quiet, self._body_late)
            return
        if _refusal_log.due("body"):
            log.warning(
                "closed an HTTP connection whose request body stalled for %.0f s "
                "(gateway.http.body_timeout_s); logged at most once every %.0f s",
                self.body_timeout_s,
                _refusal_log.every_s,
            )
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(_STALLED)
        self.transport.close()


def connection_cap(max_connections: int) -> int:
    """`max_connections`, or less when the process may not open twice that many files: each
    connection is a file descriptor, and the gRPC listener, the scheduler channel and the
    results need theirs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or max_connections <= soft // 2:
        return max_connections
    cap = max(1, soft // 2)
    log.warning(
        "gateway.http.max_connections (%d) is more than half the open-file limit (%d); "
        "serving at most %d connections (raise the limit with ulimit -n)",
        max_connections,
        soft,
        cap,
    )
    return cap


AsgiMessage = MutableMapping[str, Any]
AsgiReceive = Any
AsgiSend = Any


class EventStreamsEndOnStop:
    """ASGI middleware that ends the open `text/event-stream` responses when `end_all` is
    called (the server is stopping), and any that start afterwards: it cancels the request's
    task, then sends the response's last (empty) chunk itself, so the client sees a complete
    stream rather than a dropped connection, and uvicorn logs no error."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stopping = False
        # Request tasks streaming events -> whether this middleware has cancelled them.
        self._streams: dict[asyncio.Task[Any], bool] = {}

    def end_all(self) -> None:
        self.stopping = True
        for task in list(self._streams):
            self._cut(task)

    def _cut(self, task: asyncio.Task[Any]) -> None:
        if not self._streams.get(task, True):
            self._streams[task] = True
            task.cancel()

    async def __call__(self, scope: AsgiMessage, receive: AsgiReceive, send: AsgiSend) -> None:
        task = asyncio.current_task()
        if scope["type"] != "http" or task is None:
            await self.app(scope, receive, send)
            return
        complete = False

        async def watched(message: AsgiMessage) -> None:
            nonlocal complete
            if message["type"] == "http.response.start" and _is_event_stream(message):
                self._streams[task] = False
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True
                self._streams.pop(task, None)
            await send(message)
            if self.stopping and task in self._streams:
                self._cut(task)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            # Ours alone: a cancel from uvicorn (its own grace ran out) still propagates.
            if not self._streams.get(task) or task.uncancel() > 0:
                raise
            if not complete:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._streams.pop(task, None)


def _is_event_stream(start: AsgiMessage) -> bool:
    for name, value in start.get("headers", ()):
        if name.lower() == b"content-type":
            return bytes(value).split(b";")[0].strip().lower() == b"text/event-stream"
    return False


class _EmbeddedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, tls_handshake_timeout_s: float) -> None:
        super().__init__(config)
        self.tls_handshake_timeout_s = tls_handshake_timeout_s

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The gateway's stop event handles the signals; uvicorn must not take them over.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn creates its listener with no ssl_handshake_timeout, and offers no way to
        # pass one: for the length of its start-up, the loop's create_server adds it.
        loop = asyncio.get_running_loop()
        create_server = loop.create_server
        shadowed = "create_server" in vars(loop)

        async def with_handshake_timeout(*args: Any, **kwargs: Any) -> asyncio.Server:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", self.tls_handshake_timeout_s)
            return await create_server(*args, **kwargs)

        loop.create_server = with_handshake_timeout  # type: ignore[method-assign]
        try:
            await super().startup(sockets)
        finally:
            if shadowed:
                loop.create_server = create_server  # type: ignore[method-assign]
            else:
                del loop.create_server


@dataclass
class HttpServer:
    """A running HTTP listener."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    host: str
    port: int
    scheme: str
    event_streams: EventStreamsEndOnStop

    @property
    def url(self) -> str:
        """The base URL clients use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    async def stop(self, grace_s: float = 2.0) -> None:
        """Stops accepting, ends event streams cleanly at once (their clients resume with
        Last-Event-ID), gives the other open requests `grace_s`, then closes."""
        self.server.config.timeout_graceful_shutdown = max(int(grace_s), 1)
        self.server.should_exit = True
        self.event_streams.end_all()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, grace_s + 5)


async def start_http(
    app: FastAPI,
    host: str,
    port: int,
    tls: TlsSettings,
    limits: GatewayHttpSettings | None = None,
) -> HttpServer:
    """Binds `host:port` (0: a free port) and serves `app` there, with TLS when configured,
    within the connection `limits` (gateway.http; default: its defaults); ListenError (a
    StartupError) naming gateway.http_port when the port cannot be bound."""
    limits = limits or GatewayHttpSettings()
    protocol = GuardedH11Protocol.for_settings(
        connection_cap(limits.max_connections), limits.header_timeout_s, limits.body_timeout_s
    )
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        http=protocol,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        ssl_certfile=str(tls.cert_file) if tls.enabled else None,
        ssl_keyfile=str(tls.key_file) if tls.enabled else None,
    )
    # Wrapped around what uvicorn loads (its own middleware included), not in place of
    # `config.app`, which stays the FastAPI app with its state.
    config.load()
    event_streams = EventStreamsEndOnStop(config.loaded_app)
    config.loaded_app = event_streams
    sock = listening_socket("http_port", host, port, section="gateway")
    sock.setblocking(False)
    server = _EmbeddedServer(config, limits.tls_handshake_timeout_s)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="gateway-http")
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the HTTP server stopped during start-up")
        await asyncio.sleep(0.01)
    bound = sock.getsockname()[1]
    scheme = "https" if tls.enabled else "http"
    log.info("gateway HTTP serving on %s://%s:%d", scheme, host, bound)
    return HttpServer(server, task, host, bound, scheme, event_streams)
