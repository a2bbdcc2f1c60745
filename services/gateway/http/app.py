"""The FastAPI app of the gateway's HTTP face: routers, errors, CORS, health, docs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http import errors, jobs, oip, omni_audio, openai_images, openai_videos
from mediamesh.gateway.http.context import HttpContext, context_of
from mediamesh.gateway.http.docs_page import DOCS_HTML
from mediamesh.gateway.http.origins import CrossSiteGuard, ListedOriginsCors
from mediamesh.gateway.http.request_metrics import RequestMetrics
from mediamesh.gateway.http.result_links import ResultLinks
from mediamesh.gateway.http.schemas import Health
from mediamesh.gateway.http.security_headers import SecurityHeaders
from mediamesh.gateway.web import page as web_page

# Headers a browser page on another origin may send and read (CORS). The trace context
# (W3C traceparent, tracestate) is what a page's OpenTelemetry instrumentation adds to every
# request: the gateway reads it, and a preflight that refused it would fail the request.
ALLOWED_HEADERS = [
    "Authorization",
    "Content-Type",
    "Last-Event-ID",
    "Range",
    "If-Range",
    "If-None-Match",
    "traceparent",
    "tracestate",
]
EXPOSED_HEADERS = [
    "Retry-After",
    "Content-Range",
    "Accept-Ranges",
    "Content-Length",
    "ETag",
    "Content-Disposition",
    "WWW-Authenticate",
    # Whether a refusal passes (a 429 over a quota does not), and the methods a 405 allows.
    "X-Should-Retry",
    "Allow",
]
# HEAD reads a result's length and type before fetching it (documented for results).
ALLOWED_METHODS = ["GET", "HEAD", "POST", "DELETE"]


def create_app(
    plane: JsonPlane,
    *,
    ready: Callable[[], bool],
    max_body_bytes: int,
    cors_origins: Sequence[str] = (),  # as settings normalise them: browsers' spelling
    public_url: str | None = None,
    result_links: ResultLinks | None = None,
) -> FastAPI:
    """The HTTP face over `plane`; `ready` says whether the scheduler is reachable,
    `public_url` (gateway.http.public_url) where clients reach it, for absolute links."""
    guard = CrossSiteGuard(cors_origins, keyless=plane.tenancy.open)
    app = FastAPI(
        title="mediamesh gateway",
        summary="Submit and follow diffusion jobs over HTTP/JSON; an OpenAI-compatible API",
        version="1",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        dependencies=[Depends(guard)],
    )
    links = None if plane.tenancy.open else result_links
    app.state.context = HttpContext(plane, ready, max_body_bytes, public_url, links)
    errors.install(app)
    if cors_origins:
        app.add_middleware(
            ListedOriginsCors,
            allowed_origins=list(cors_origins),
            allow_methods=ALLOWED_METHODS,
            allow_headers=ALLOWED_HEADERS,
            expose_headers=EXPOSED_HEADERS,
        )
    # Outside CORS, so that its preflight answers carry them too.
    app.add_middleware(SecurityHeaders)
    # Added last, so outermost: it sees every answer, the guards' refusals included.
    app.add_middleware(RequestMetrics)
    app.include_router(jobs.router)
    app.include_router(openai_images.router)
    app.include_router(openai_videos.router)
    app.include_router(omni_audio.router)
    app.include_router(oip.router)
    web_page.install(app)

    @app.get("/healthz", response_model=Health, tags=["health"], summary="Liveness")
    async def healthz() -> Health:
        """200 while the process serves."""
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        responses={503: {"model": Health}},
        tags=["health"],
        summary="Readiness",
    )
    async def readyz(request: Request) -> JSONResponse:
        """200 while the gateway reaches its scheduler, else 503 (take it out of rotation)."""
        if context_of(request).ready():
            return JSONResponse({"status": "ready"})
        return JSONResponse(
            {"status": "scheduler unreachable"},
            status_code=503,
            headers={"Retry-After": str(errors.UNAVAILABLE_RETRY_AFTER_S)},
        )

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(DOCS_HTML)

    return app
