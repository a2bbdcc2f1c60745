"""Prometheus metrics for the HTTP face, which the gRPC interceptor's metrics never see.

Requests are counted by route template (`/v1/jobs/{job_id}`, not each job's path, so the
series stay few), method and HTTP status; a path no route matches counts as `unmatched`, and
a method outside HTTP's usual ones as `other`.
"""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mediamesh.common.metrics import REQUEST_LATENCY_BUCKETS

HTTP_REQUESTS = Counter(
    "mediamesh_http_requests",
    "HTTP requests the gateway answered, by route template, method and status.",
    ["route", "method", "status"],
)
HTTP_LATENCY = Histogram(
    "mediamesh_http_request_seconds",
    "Time to answer an HTTP request (an event stream: until it ends).",
    ["route", "method"],
    buckets=REQUEST_LATENCY_BUCKETS,
)
UNMATCHED = "unmatched"
# Any client, with no key, may send any token as the method; each would be a new series.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"


def method_label(method: str) -> str:
    """`method` as the metrics' label: one of METHODS, else `other`."""
    return method if method in METHODS else OTHER_METHOD


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        # A request that fails before answering is answered 500 by the server.
        status = 500

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            # The router leaves the route it matched in the scope.
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = method_label(scope["method"])
            HTTP_REQUESTS.labels(route, method, str(status)).inc()
            HTTP_LATENCY.labels(route, method).observe(time.perf_counter() - started)
