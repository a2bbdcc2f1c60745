"""Requests written for vLLM-Omni's images and videos routes run unchanged: its
`num_inference_steps` is the mesh's `steps`, and errors about it use the name sent."""

from __future__ import annotations

import base64

import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    bearer,
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _steps_of_newest_job(mesh: InProcessMesh, model: str) -> int:
    jobs = [job for job in mesh.core.jobs.values() if job.model == model]
    return max(jobs, key=lambda job: job.created_at).params.steps


async def test_an_image_request_as_vllm_omnis_docs_write_it(http_mesh: InProcessMesh):  # noqa: F811
    body = {"prompt": "a cat in a tiara", "size": "64x64", "num_inference_steps": 3, "seed": 42}
    async with http_client(http_mesh, KEY_A) as client:
        answer = await client.post("/v1/images/generations", json=body)
    assert answer.status_code == 200, answer.text
    (image,) = answer.json()["data"]
    assert base64.b64decode(image["b64_json"]).startswith(b"\x89PNG")
    assert _steps_of_newest_job(http_mesh, "flux-tiny") == 3


async def test_an_edit_and_a_video_take_the_name_too(http_mesh: InProcessMesh):  # noqa: F811
    async with http_client(http_mesh, KEY_A) as client:
        video = await client.post(
            "/v1/videos",
            json={"model": "wan-tiny", "prompt": "waves", "num_inference_steps": 2},
        )
        assert video.status_code == 200, video.text
        assert _steps_of_newest_job(http_mesh, "wan-tiny") == 2
        # The same value under both names is one setting.
        edit = await client.post(
            "/v1/images/edits",
            data={"prompt": "a fox", "num_inference_steps": "2", "steps": "2"},
            files={"image": ("in.png", png_bytes(64, 64), "image/png")},
        )
    assert edit.status_code == 200, edit.text
    assert _steps_of_newest_job(http_mesh, "flux-img2img-tiny") == 2


@pytest.mark.parametrize(
    ("body", "start"),
    [
        ({"num_inference_steps": 999}, "num_inference_steps: 999 is out of range"),
        ({"num_inference_steps": 2, "steps": 3}, "num_inference_steps: '2' beside steps '3'"),
        ({"true_cfg_scale": 4.0}, "true_cfg_scale: not a field of image generations"),
    ],
)
async def test_errors_name_the_field_as_sent(http_mesh: InProcessMesh, body, start):  # noqa: F811
    async with http_client(http_mesh) as client:
        answer = await client.post(
            "/v1/images/generations",
            json={"prompt": "x", "size": "64x64", **body},
            headers=bearer(KEY_A),
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith(start)


async def test_an_openai_client_request_is_unchanged(http_mesh: InProcessMesh):  # noqa: F811
    """Without the name the steps are the model's default, as before."""
    async with http_client(http_mesh, KEY_A) as client:
        answer = await client.post(
            "/v1/images/generations", json={"prompt": "a fox", "size": "64x64", "seed": 1}
        )
    assert answer.status_code == 200, answer.text
    assert _steps_of_newest_job(http_mesh, "flux-tiny") == 4
