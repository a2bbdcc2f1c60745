"""Nothing a request says is ignored: a query parameter a list route does not take, or one
it takes once given twice, is a 400 naming it; a body of a type the route does not read is
a 415 naming the types it does; an error about a listing names the parameter the caller
sent (`after`), not the mesh's field behind it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
async def client(http_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    async with http_client(http_mesh, KEY_A) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "query", "words"),
    [
        ("/v1/jobs", "status=FAILED", "status: not a query parameter of /v1/jobs; it takes after"),
        ("/v1/jobs", "status=FAILED&x=1", "status, x: not query parameters of /v1/jobs"),
        ("/v1/jobs", "limit=1&limit=2", "limit: given 2 times; give it once"),
        ("/v1/jobs", "order=asc&order=desc", "order: given 2 times"),
        ("/v1/videos", "state=FAILED", "state: not a query parameter of /v1/videos"),
        ("/v1/jobs", "after=nope", "after: no job 'nope'"),
        ("/v1/videos", "after=nope", "after: no job 'nope'"),
        # Empty is no cursor: read as none, the walk would start over from the first page.
        ("/v1/jobs", "after=", "after"),
        ("/v1/videos", "after=", "after"),
        ("/v1/jobs", "model=Bad%20Name!", "model: 'Bad Name!' does not match"),
    ],
)
async def test_a_listing_refuses_what_it_would_otherwise_ignore(
    client: httpx.AsyncClient, path: str, query: str, words: str
) -> None:
    answer = await client.get(f"{path}?{query}")
    assert answer.status_code == 400, answer.text
    body = answer.json()
    message = body["message"] if "message" in body else body["error"]["message"]
    assert words in message, message


async def test_the_parameters_a_listing_takes_still_work(client: httpx.AsyncClient) -> None:
    answer = await client.get("/v1/jobs?state=SUCCEEDED&state=FAILED&model=echo&limit=2")
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("path", "content_type", "accepted"),
    [
        (
            "/v1/jobs",
            "text/plain",
            "application/json or multipart/form-data or application/x-www-form-urlencoded",
        ),
        ("/v1/images/generations", "text/plain", "send application/json"),
        ("/v1/images/generations", "multipart/form-data; boundary=x", "send application/json"),
        ("/v1/videos", "application/xml", "send application/json or multipart/form-data"),
        ("/v1/images/edits", "application/json", "multipart/form-data"),
    ],
)
async def test_a_body_of_another_type_is_415_naming_the_types_read(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
    path: str,
    content_type: str,
    accepted: str,
) -> None:
    before = len(http_mesh.core.jobs)
    body = '{"model": "echo", "prompt": "plain"}'
    answer = await client.post(path, content=body, headers={"Content-Type": content_type})
    assert answer.status_code == 415, answer.text
    body_json = answer.json()
    message = body_json["message"] if "message" in body_json else body_json["error"]["message"]
    assert message.startswith("Content-Type: ") and accepted in message, message
    assert len(http_mesh.core.jobs) == before


async def test_a_json_body_without_a_content_type_is_still_read_as_json(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.post("/v1/jobs", content=b'{"model": "echo", "prompt": "no type"}')
    assert answer.status_code == 202, answer.text
    edit = await client.post(
        "/v1/images/edits",
        data={"model": "flux-img2img-tiny", "prompt": "x", "steps": "1"},
        files={"image": ("in.png", png_bytes(), "image/png")},
    )
    assert edit.status_code == 200, edit.text
