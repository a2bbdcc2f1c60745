"""POST /v1/videos with a JSON body: its values keep their JSON types and the mesh's fields
are checked as /v1/jobs checks them (an object stays an object, `true` is not a number), an
OpenAI field of the wrong type is refused naming it, and `input_reference`, a file, is
refused with where to send it instead."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
SMALL = {"model": "wan-tiny", "size": "64x64", "steps": 1}


@pytest.fixture
async def client(http_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    async with http_client(http_mesh, KEY_A) as client:
        yield client


async def created(client: httpx.AsyncClient, **fields: object) -> dict:
    answer = await client.post("/v1/videos", json={"prompt": "x", **SMALL, **fields})
    assert answer.status_code == 200, answer.text
    video: dict = answer.json()
    await client.delete(f"/v1/videos/{video['id']}")  # only its acceptance matters here
    return video


@pytest.mark.parametrize(
    "mesh_fields",
    [
        {"steps": True},
        {"steps": "many"},
        {"adapters": [{"name": "no-such-style"}]},
        {"adapters": {"name": "style"}},
        {"webhook": {"url": "https://hooks.example.com/x"}},
        {"seed": [1]},
        {"no_such_field": 1},
    ],
)
async def test_the_mesh_fields_are_refused_exactly_as_v1_jobs_refuses_them(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
    mesh_fields: dict,
) -> None:
    before = len(http_mesh.core.jobs)
    as_job = await client.post(
        "/v1/jobs",
        json={"model": "wan-tiny", "prompt": "x", "width": 64, "height": 64, **mesh_fields},
    )
    as_video = await client.post("/v1/videos", json={"prompt": "x", **SMALL, **mesh_fields})
    assert as_job.status_code >= 400, as_job.text
    assert as_video.status_code == as_job.status_code, as_video.text
    error = as_video.json()["error"]
    assert error["message"] == as_job.json()["message"]
    # param is the field the message names, a path into the body where it is one.
    assert error["param"] == as_job.json()["message"].partition(":")[0]
    # Nothing arrived as Python's text for a value ("True", "{'name': ...}").
    assert "True" not in as_video.text and "{'" not in as_video.text
    assert len(http_mesh.core.jobs) == before


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("prompt", 123, "prompt: expected a string, got a number"),
        ("prompt", ["a"], "prompt: expected a string, got an array"),
        ("size", {"width": 64}, "size: expected a string, got an object"),
        ("model", False, "model: expected a string, got false"),
        ("seconds", True, "seconds: expected a string, got true"),
    ],
)
async def test_an_openai_field_of_another_json_type_is_refused_naming_it(
    client: httpx.AsyncClient, field: str, value: object, words: str
) -> None:
    answer = await client.post("/v1/videos", json={"prompt": "x", **SMALL, field: value})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == words
    assert answer.json()["error"]["param"] == field


async def test_input_reference_in_json_is_refused_pointing_at_a_file_part(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.post(
        "/v1/videos", json={"prompt": "x", **SMALL, "input_reference": "aGVsbG8="}
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "input_reference" and "multipart/form-data" in error["message"]


async def test_json_numbers_are_taken_as_numbers(client: httpx.AsyncClient) -> None:
    # seconds as a JSON number; fps as one (17 frames at 16 fps: wan-tiny takes 4k + 1).
    assert (await created(client, seconds=1))["seconds"] == "1.125"
    video = await created(client, seconds="1", fps=16)
    assert video["seconds"] == "1.0625"
    refused = await client.post("/v1/videos", json={"prompt": "x", **SMALL, "fps": 2.5})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "fps"
