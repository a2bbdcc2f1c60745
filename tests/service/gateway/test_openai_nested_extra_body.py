"""The mesh's nested fields (`adapters`, `webhook`) sent in `extra_body` through the openai
client's multipart routes (videos, image edits), which flatten them into bracketed form
names, are read as the same JSON value `POST /v1/jobs` reads: they were refused as unknown
fields with no `param`. Image generations and edits take `adapters` as videos do."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
ADAPTERS = [{"name": "style-x", "scale": 0.5}, {"name": "style-y"}]


async def as_a_job(mesh: InProcessMesh, model: str, fields: dict) -> str:
    async with http_client(mesh, KEY_A) as client:
        answer = await client.post("/v1/jobs", json={"model": model, "prompt": "x", **fields})
    assert answer.status_code == 404, answer.text
    message: str = answer.json()["message"]
    return message


async def test_videos_take_adapters_as_v1_jobs_reads_them(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    expected = await as_a_job(http_mesh, "wan-tiny", {"adapters": ADAPTERS})
    assert expected.startswith("adapters[0].name: ")
    client = openai_client(http_mesh)
    with pytest.raises(openai.NotFoundError) as refused:
        await client.videos.create(
            model="wan-tiny",
            prompt="x",
            size="64x64",
            extra_body={"steps": 1, "adapters": ADAPTERS},  # type: ignore[arg-type]
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["message"] == expected and error["param"] == "adapters[0].name"


async def test_image_edits_take_them_too_and_a_wrong_leaf_is_named(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.edit(
            model="flux-img2img-tiny",
            image=("in.png", png_bytes(), "image/png"),
            prompt="x",
            extra_body={"adapters": [{"name": "style-x", "scale": "big"}]},
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["param"] == "adapters[0].scale", error


async def test_a_nested_value_sent_both_ways_is_a_repeat(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with http_client(http_mesh, KEY_A) as client:
        answer = await client.post(
            "/v1/jobs",
            files={"image": ("in.png", png_bytes(), "image/png")},
            data={
                "model": "flux-img2img-tiny",
                "prompt": "x",
                "adapters": '[{"name": "a"}]',
                "adapters[][name]": "b",
            },
        )
    assert isinstance(answer, httpx.Response)
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "adapters: sent 2 times; send it once"


async def test_image_generations_apply_adapters_from_extra_body(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)

    async def image(extra: dict) -> str:
        answer = await client.images.generate(
            model="flux-tiny",
            prompt="a fox",
            size="32x32",
            extra_body={"steps": 2, "seed": 7, **extra},
        )
        assert answer.data is not None and answer.data[0].b64_json
        return answer.data[0].b64_json

    plain = await image({})
    styled = await image({"adapters": [{"name": "style", "scale": 0.5}]})
    assert styled != plain
    assert await image({"adapters": [{"name": "style", "scale": 0.5}]}) == styled
