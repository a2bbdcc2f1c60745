"""Refuses requests that a browser sends on behalf of another site.

A page on any site can make a browser POST a form (multipart, urlencoded or plain text) to
the gateway without asking first: CORS keeps the page from reading the answer, not the job
from running. Browsers name the page's origin on such requests; other clients (curl, the SDK,
the openai package) send none, so they are not affected. Pages on the gateway's own origin
and on the origins listed in `gateway.http.cors_origins` are allowed. A `"*"` there lets
pages on any origin read (CORS), never write: a write needs its origin listed by name, so
`"*"` cannot switch the check off (and settings refuse it on a gateway without keys).

A gateway without API keys, reached over loopback, also checks the name a request is
addressed to (`Host`). DNS rebinding lets a page at `attacker.example:PORT` have its name
resolve to 127.0.0.1: the browser then sends the page's requests, writes and reads alike, to
this gateway as same-origin ones, `Host` and `Origin` both `attacker.example:PORT`, and lets
the page read the answers. Only a name the page's site does not control tells them apart:
localhost, a loopback address, or the host of a configured CORS origin. With keys the check
is not needed (the rebound page has no key), and a gateway reached on another address runs
without keys only with `--insecure`, which opens it to whoever can reach it.

Private Network Access: Chromium asks a preflight `Access-Control-Request-Private-Network:
true` before a page on a public secure origin reaches a gateway on loopback or a LAN.
`ListedOriginsCors` grants that to the origins listed by name only; `"*"` never opens the
private network to every site.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp

from mediamesh.common.errors import PermissionDenied

# Methods a browser sends across sites without asking first only for reads.
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The one name browsers and resolvers map to this machine without asking DNS.
_LOOPBACK_NAME = "localhost"


class CrossSiteGuard:
    """A dependency of every route: a write whose Origin is neither this host nor an allowed
    origin (listed by name: `"*"` allows reads only) is refused (403) before the route reads
    its body; with `keyless`, so is any request over loopback addressed to a name other than
    localhost, a loopback address or an allowed origin's host."""

    def __init__(self, allowed_origins: Sequence[str] = (), keyless: bool = False) -> None:
        # As settings write them, browsers' way, and as CORS compares them: exactly. Matching
        # more loosely here would admit writes from an origin CORS never answers.
        self._allowed = frozenset(o for o in allowed_origins if o != "*")
        self._star = " by name ('*' admits reads only)" if "*" in allowed_origins else ""
        self._hosts = frozenset(
            name for o in allowed_origins if o != "*" and (name := urlsplit(o).hostname)
        )
        self._keyless = keyless

    async def __call__(self, request: Request) -> None:
        # A coroutine, so that FastAPI runs it on the event loop: a plain function dependency
        # goes to its thread pool, a hand-off to another thread and back on every request.
        self.check(request)

    def check(self, request: Request) -> None:
        """Raises PermissionDenied for a request the guard refuses (see the class)."""
        host = request.headers.get("host", "")
        if self._keyless and _over_loopback(request) and not self._names_this_gateway(host):
            raise PermissionDenied(
                f"host: {host[:64]!r} is not a name of this gateway; without "
                "gateway.api_keys it answers only requests to localhost, a loopback address "
                "or the host of an origin in gateway.http.cors_origins"
            )
        if request.method in _READ_METHODS:
            return
        origin = request.headers.get("origin")
        if origin is not None and not self._admits(origin, host):
            raise PermissionDenied(
                f"origin: requests from {origin} may not change anything here; serve the "
                f"page from this gateway or add its origin to gateway.http.cors_origins{self._star}"
            )

    def _admits(self, origin: str, host: str) -> bool:
        origin = origin.lower()
        if origin in self._allowed:
            return True
        # "null" (a sandboxed frame, a file) has no host and never matches.
        return bool(host) and urlsplit(origin).netloc == host.lower()

    def _names_this_gateway(self, host: str) -> bool:
        name = host_name(host)
        return name == _LOOPBACK_NAME or is_loopback_address(name) or name in self._hosts


def host_name(host: str) -> str:
    """The name in a `Host` header, in lower case, without its port or an IPv6 address's
    brackets; empty for none."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, _ = host[1:].partition("]")
        return name if bracket else ""
    return host.partition(":")[0]


def is_loopback_address(text: str) -> bool:
    """Whether `text` is an IP address of this machine's loopback interface (127.0.0.0/8,
    ::1, or 127.x written as an IPv4-mapped IPv6 address)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _over_loopback(request: Request) -> bool:
    """Whether the connection reached the gateway on a loopback address (the address it was
    accepted on; unknown counts as loopback, the side that checks)."""
    server = request.scope.get("server")
    return not server or is_loopback_address(str(server[0]))


class ListedOriginsCors(CORSMiddleware):
    """Starlette's CORS, granting a private-network preflight (Chromium's Private Network
    Access) only to an origin in `allowed_origins` by name, never through `"*"`."""

    def __init__(
        self,
        app: ASGIApp,
        allowed_origins: Sequence[str] = (),
        allow_methods: Sequence[str] = (),
        allow_headers: Sequence[str] = (),
        expose_headers: Sequence[str] = (),
    ) -> None:
        super().__init__(
            app,
            allow_origins=list(allowed_origins),
            allow_methods=allow_methods,
            allow_headers=allow_headers,
            expose_headers=expose_headers,
            allow_private_network=True,
        )
        self._named = frozenset(o for o in allowed_origins if o != "*")

    def preflight_response(self, request_headers: Headers) -> Response:
        origin = request_headers["origin"]
        if "access-control-request-private-network" in request_headers and (
            origin not in self._named
        ):
            return PlainTextResponse(
                f"Disallowed CORS private-network: origin {origin[:64]} is not listed by name "
                "in gateway.http.cors_origins",
                status_code=400,
            )
        return super().preflight_response(request_headers)
