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

from fastapi import Request

from mediamesh.common.errors import PermissionDenied

# Methods a browser sends across sites without asking first only for reads.
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CrossSiteGuard:
    """A dependency of every route: a write whose Origin is neither this host nor an allowed
    origin is refused (403) before the route reads its body."""

    def __init__(self, allowed_origins: Sequence[str] = ()) -> None:
        self._any = "*" in allowed_origins
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    def __call__(self, request: Request) -> None:
        if request.method in _READ_METHODS:
            return
        origin = request.headers.get("origin")
        if origin is not None and not self._admits(origin, request.headers.get("host", "")):
            raise PermissionDenied(
                f"origin: requests from {origin} may not change anything here; serve the "
                "page from this gateway or add its origin to gateway.http.cors_origins"
            )

    def _admits(self, origin: str, host: str) -> bool:
        origin = origin.lower()
        if self._any or origin in self._allowed:
            return True
        # "null" (a sandboxed frame, a file) has no host and never matches.
        return bool(host) and urlsplit(origin).netloc == host.lower()
