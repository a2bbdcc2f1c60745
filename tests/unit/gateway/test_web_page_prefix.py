"""The page and job links behind a proxy that serves the gateway under a path prefix
(gateway.http.public_url `https://host/mesh`) and strips it before passing requests on."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from mediamesh.gateway.http import errors
from mediamesh.gateway.http.context import with_links
from mediamesh.gateway.web import page

PREFIX = "/mesh"


def behind_a_prefix_stripping_proxy(app: ASGIApp) -> ASGIApp:
    """`app` reachable only under PREFIX, which is taken off the path, as a proxy would."""

    async def proxy(scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and not path.startswith(f"{PREFIX}/"):
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app({**scope, "path": path.removeprefix(PREFIX)}, receive, send)

    return proxy


def test_the_page_loads_its_files_under_the_prefix() -> None:
    app = FastAPI()
    errors.install(app)
    page.install(app)
    client = TestClient(behind_a_prefix_stripping_proxy(app))
    page_url = f"http://testserver{PREFIX}/"
    index = client.get(page_url)
    assert index.status_code == 200
    assets = re.findall(
        r'<(?:script|link rel="stylesheet") [^>]*(?:src|href)="([^"]+)"', index.text
    )
    assert len(assets) == 2, assets
    for reference in assets:
        url = urljoin(page_url, reference)
        assert urlsplit(url).path.startswith(f"{PREFIX}/web/"), reference
        assert client.get(url).status_code == 200, url


def test_the_script_asks_the_api_relative_to_the_page() -> None:
    script = page.read_static("app.js").decode()
    # A string or template literal that starts with /v1/ or /web/ leaves the prefix behind.
    absolute = re.findall(r"""["'`]/(?:v1|web)\b[^"'`]*""", script)
    assert not absolute, absolute
    assert re.search(r"""api\(["'`]v1/models""", script)


def test_job_links_carry_the_public_urls_path_prefix() -> None:
    job = {"job_id": "j1", "result": {"mime_type": "image/png"}}
    linked = with_links(job, f"https://mesh.example.com{PREFIX}")
    assert linked["links"] == {
        "self": f"{PREFIX}/v1/jobs/j1",
        "events": f"{PREFIX}/v1/jobs/j1/events",
        "result": f"{PREFIX}/v1/jobs/j1/result",
    }
    assert linked["result"]["url"] == f"https://mesh.example.com{PREFIX}/v1/jobs/j1/result"
    assert with_links(job, "http://localhost:8080/")["links"]["self"] == "/v1/jobs/j1"
