"""Routes serving the web page: `/` and its few static files, read once from package data.

The files are plain HTML, JS and CSS with no build step and nothing from a CDN; the page talks
only to this gateway's `/v1` API, so a strict Content-Security-Policy fits it. Images and media
may come from another origin (presigned object-storage URLs), hence the wider img/media rules.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import Response

from mediamesh.common.errors import NotFound

STATIC_PACKAGE = "mediamesh.gateway.web"
# Name served under /web/ -> content type. Only these are served: no path from the request
# ever reaches the file system.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
INDEX = "index.html"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src * data: blob:; media-src * data: blob:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The files change with the package; a reload after an upgrade must see the new ones.
    "Cache-Control": "no-cache",
}


def read_static(name: str) -> bytes:
    """One of the page's files from the installed package."""
    return (files(STATIC_PACKAGE) / "static" / name).read_bytes()


def install(app: FastAPI) -> None:
    """Serves the page at `/` and its assets at `/web/<name>` on `app`."""
    index = read_static(INDEX)
    assets = {name: (read_static(name), mime) for name, mime in ASSETS.items()}

    # HEAD too: link checkers, uptime probes and proxies ask it of a page before its bytes.
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def web_page() -> Response:
        return Response(index, media_type="text/html; charset=utf-8", headers=HEADERS)

    @app.api_route("/web/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def web_asset(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise NotFound(f"/web/{name[:64]}: no such file")
        return Response(found[0], media_type=found[1], headers=HEADERS)
