"""Refuses requests that change something when a browser sends them from another site.

A page on any site can make a browser POST a form (multipart, urlencoded or plain text) to
the gateway without asking first: CORS keeps the page from reading the answer, not the job
from running. Browsers name the page's origin on such requests; other clients (curl, the SDK,
the openai package) send none, so they are not affected. Pages on the gateway's own origin
and on the origins listed in `gateway.http.cors_origins` are allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from mediamesh.common.errors import PermissionDenied
from mediamesh.gateway.http.errors import error_response

# Methods a browser sends across sites without asking first only for reads.
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CrossSiteGuard:
    """ASGI middleware: a write whose Origin is neither this host nor an allowed origin is 403."""

    def __init__(self, app: ASGIApp, allowed_origins: Sequence[str] = ()) -> None:
        self.app = app
        self._any = "*" in allowed_origins
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in _READ_METHODS:
            origin = _header(scope, b"origin")
            if origin is not None and not self._admits(origin, _header(scope, b"host") or ""):
                refused = PermissionDenied(
                    f"origin: requests from {origin} may not change anything here; serve the "
                    "page from this gateway or add its origin to gateway.http.cors_origins"
                )
                await error_response(refused, scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _admits(self, origin: str, host: str) -> bool:
        origin = origin.lower()
        if self._any or origin in self._allowed:
            return True
        # "null" (a sandboxed frame, a file) has no host and never matches.
        return bool(host) and urlsplit(origin).netloc == host.lower()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
