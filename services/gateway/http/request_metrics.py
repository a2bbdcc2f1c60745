"""Prometheus metrics for the HTTP face, which the gRPC interceptor's metrics never see.

Requests are counted by route template (`/v1/jobs/{job_id}`, not each job's path, so the
series stay few), method and HTTP status; a path no route matches counts as `unmatched`, and
a method outside HTTP's usual ones as `other`. A request answered before routing (a CORS
preflight) counts under the template its path matches.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import fastapi.routing
from prometheus_client import Counter, Histogram
from starlette.routing import compile_path
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


@dataclass(frozen=True)
class RouteTemplate:
    """A route's path template, the paths it matches and the methods it answers."""

    template: str
    pattern: re.Pattern[str]
    methods: frozenset[str]


def route_templates(routes: Iterable[object]) -> list[RouteTemplate]:
    """The templates of `routes`, in the order the router tries them."""
    # FastAPI from 0.16x keeps an included router as one entry; this walks into them.
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    flat = contexts(list(routes)) if contexts is not None else routes
    found = []
    for route in flat:
        template = getattr(route, "path", None)
        if isinstance(template, str) and template:
            methods = frozenset(getattr(route, "methods", None) or ())
            found.append(RouteTemplate(template, compile_path(template)[0], methods))
    return found


def template_of(templates: list[RouteTemplate], path: str, method: str) -> str:
    """The template of the first route answering `method` at `path`, else of the first
    route at `path` at all; `unmatched` for none."""
    at_path = [t for t in templates if t.pattern.match(path)]
    for candidate in at_path:
        if method in candidate.methods:
            return candidate.template
    return at_path[0].template if at_path else UNMATCHED


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The app's routes, read at the first request answered before routing: by then
        # every router is included.
        self._templates: list[RouteTemplate] | None = None

    def route_label(self, scope: Scope) -> str:
        """The template of the route `scope` went to, or would have gone to; `unmatched`."""
        routed = getattr(scope.get("route"), "path", None)
        if routed:
            return str(routed)
        # A CORS preflight is answered before routing, which leaves no route in the scope;
        # its path is a route's as much as the request it asks about.
        if self._templates is None:
            self._templates = route_templates(getattr(scope.get("app"), "routes", ()))
        headers = dict(scope.get("headers") or ())
        asked = headers.get(b"access-control-request-method", b"").decode("latin-1")
        return template_of(self._templates, scope["path"], asked.upper() or scope["method"])

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
            route = self.route_label(scope)
            method = method_label(scope["method"])
            HTTP_REQUESTS.labels(route, method, str(status)).inc()
            HTTP_LATENCY.labels(route, method).observe(time.perf_counter() - started)
