"""The HTTP client webhooks are sent with: it connects only to addresses checked beforehand.

A webhook's host is resolved, and its addresses judged (webhook_policy.address_problem),
before each attempt. Were the client to resolve the name again to connect, a DNS answer that
changed in between (rebinding: public for the check, 169.254.169.254 for the connection)
would get past the check. So the attempt pins the checked addresses (`pinned`) and the
client's network backend connects to those, in order, and to nothing else: a connection to a
host the attempt did not pin is refused. The URL, the Host header, TLS's SNI and the
certificate check all keep the host name; only where the socket goes is decided here.

Connections are pooled by host and port as usual: one opened for an attempt went to an
address that attempt checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import typing
from collections.abc import Iterator
from contextvars import ContextVar

import httpcore
import httpx

# (host as the connection names it, port) -> the checked addresses, for the running attempt.
_PINNED: ContextVar[dict[tuple[str, int], tuple[str, ...]] | None] = ContextVar(
    "webhook_pinned_addresses", default=None
)


def connect_host(url: str) -> str:
    """The host name the client connects for `url` by (IDNA-encoded, lowercase; an IPv6
    address without brackets): what to resolve, and the key of the pin."""
    return httpx.URL(url).raw_host.decode("ascii").lower()


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for a TCP connection to `port`, in the resolver's
    order (an IP address resolves to itself); OSError when it resolves to none."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


@contextlib.contextmanager
def pinned(host: str, port: int, addresses: list[str]) -> Iterator[None]:
    """Within the block, connections to `host`:`port` go to `addresses` only."""
    token = _PINNED.set({**(_PINNED.get() or {}), (host, port): tuple(addresses)})
    try:
        yield
    finally:
        _PINNED.reset(token)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the addresses pinned for the host, never to what a lookup says now."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = (_PINNED.get() or {}).get((host.lower(), port))
        if not addresses:
            raise httpcore.ConnectError(f"no checked address for {host}:{port}; not connecting")
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are never sent over a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport, its connection pool built on `PinnedBackend`. No proxy and no
    environment: a proxy would resolve the name itself."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend | None = None) -> None:
        super().__init__(trust_env=False)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        # The pool httpx would build, but for the backend (httpx takes no backend argument).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedBackend(backend),
        )


def webhook_client(timeout_s: float) -> httpx.AsyncClient:
    """The client webhooks are sent with: pinned connections, no redirects (a receiver on the
    allowlist must not send us elsewhere), no proxy or settings from the environment."""
    return httpx.AsyncClient(
        transport=PinnedTransport(),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
    )
