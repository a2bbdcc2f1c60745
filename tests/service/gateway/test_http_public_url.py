"""With gateway.http.public_url the HTTP face's absolute links start with it, whatever scheme
and Host the request came with (a TLS proxy in front, a forged Host); without it they start
with the request's own.

The face is built here with `create_app` over the in-process mesh's plane and called in
process, so that one mesh serves it with and without the setting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http.app import create_app
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    MAX_BODY,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    read_events,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
PUBLIC = "https://mesh.example.com/base"


def plane_of(mesh: InProcessMesh) -> JsonPlane:
    assert mesh.gateway.http is not None
    plane: JsonPlane = mesh.gateway.http.server.config.app.state.context.plane
    return plane


async def face(mesh: InProcessMesh, public_url: str | None) -> httpx.AsyncClient:
    """A client of a face over the mesh's plane, asked under a name a proxy inside uses."""
    app = create_app(
        plane_of(mesh), ready=lambda: True, max_body_bytes=MAX_BODY, public_url=public_url
    )
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://gateway.internal:8080",
        headers=bearer(KEY_A),
        timeout=120,
    )


@pytest.fixture
async def public(http_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    async with await face(http_mesh, PUBLIC) as client:
        yield client


async def test_every_result_url_starts_with_the_public_url(public: httpx.AsyncClient) -> None:
    made = await public.post("/v1/jobs", json={"model": "echo", "prompt": "linked", "steps": 1})
    job_id = made.json()["job_id"]
    expected = f"{PUBLIC}/v1/jobs/{job_id}/result"
    events = await read_events(public, job_id, KEY_A)
    assert events[-1]["event"] == "result" and events[-1]["data"]["url"] == expected
    forged = {"Host": "evil.example", "X-Forwarded-Proto": "http"}
    job = (await public.get(f"/v1/jobs/{job_id}", headers=forged)).json()
    assert job["result"]["url"] == expected
    listed = (await public.get("/v1/jobs", params={"limit": 100})).json()["data"]
    assert next(j for j in listed if j["job_id"] == job_id)["result"]["url"] == expected
    url = await public.post(
        "/v1/images/generations",
        json={"model": "echo", "prompt": "x", "response_format": "url"},
    )
    assert url.json()["data"][0]["url"].startswith(f"{PUBLIC}/v1/jobs/"), url.text


async def test_without_it_links_follow_the_request(http_mesh: InProcessMesh) -> None:  # noqa: F811
    async with await face(http_mesh, None) as derived:
        made = await derived.post("/v1/jobs", json={"model": "echo", "prompt": "x", "steps": 1})
        job_id = made.json()["job_id"]
        await read_events(derived, job_id, KEY_A)
        job = (await derived.get(f"/v1/jobs/{job_id}")).json()
    assert job["result"]["url"] == f"http://gateway.internal:8080/v1/jobs/{job_id}/result"
