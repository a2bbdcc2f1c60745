"""The OpenAI image routes take the same fields of the mesh's own, and refuse the rest by
name; they advise only what their clients can send; a timeout_ms no retry can meet is the
request's fault on every HTTP face."""

from __future__ import annotations

import base64

import httpx
import openai
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
EDIT = {"model": "flux-img2img-tiny", "prompt": "x", "steps": "1"}
IMAGE = {"image": ("in.png", png_bytes(), "image/png")}


async def test_edits_refuse_the_job_fields_generations_refuse(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    refused_fields = {
        "idempotency_key": "k1",
        "preview_every_steps": "1",
        "result_as_url": "true",
        "timeout_ms": "60000",
        "output_quality": "40",
        "width": "64",
    }
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for field, value in refused_fields.items():
            for path, request in (
                ("/v1/images/edits", {"data": {**EDIT, field: value}, "files": IMAGE}),
                (
                    "/v1/images/generations",
                    {"json": {"model": "flux-tiny", "prompt": "x", field: value}},
                ),
            ):
                answer = await http.post(path, headers=bearer(KEY_A), **request)  # type: ignore[arg-type]
                assert answer.status_code == 400, (path, field, answer.text)
                error = answer.json()["error"]
                assert error["param"] == field, (path, error)
                mesh_fields = (
                    "adapters, guidance_scale, negative_prompt, priority, seed, steps "
                    "(steps also as num_inference_steps)"
                )
                assert f"the mesh's own {mesh_fields}" in error["message"]
        # width beside size is no field either (not "set size or width", as if alone it were).
        sized = {**EDIT, "size": "64x64", "width": "64"}
        answer = await http.post("/v1/images/edits", headers=bearer(KEY_A), data=sized, files=IMAGE)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "width"
        # output_compression and the mesh's output_quality at once: refused, not one kept.
        both = {**EDIT, "output_format": "jpeg", "output_compression": "80", "output_quality": "40"}
        answer = await http.post(
            "/v1/images/edits", headers=bearer(KEY_A), data=both, files=IMAGE
        )  # fmt: skip
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "output_quality"


async def test_a_model_that_needs_an_image_cannot_serve_a_generation(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    for name in ("sdxl-inpaint-tiny", "flux-img2img-tiny"):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.images.generate(model=name, prompt="x")
        assert refused.value.param == "model", refused.value.message
        assert "/v1/images/edits" in refused.value.message
        assert "image_id" not in refused.value.message
        assert "that needs none: " in refused.value.message
        assert "flux-tiny" in refused.value.message.rpartition("needs none: ")[2]
    # An edit without the mask its model needs is told to send the form's mask part.
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.edit(
            model="sdxl-inpaint-tiny", prompt="x", image=("in.png", png_bytes(), "image/png")
        )
    assert refused.value.param == "mask"
    assert "mask_image_id" not in refused.value.message
    assert refused.value.message.endswith("send an image as the form's 'mask' file part")
    await client.close()


async def test_a_null_response_format_is_openais_default(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        body = {"model": "flux-tiny", "prompt": "x", "steps": 1, "response_format": None}
        answer = await http.post("/v1/images/generations", headers=bearer(KEY_A), json=body)
        assert answer.status_code == 200, answer.text
        assert base64.b64decode(answer.json()["data"][0]["b64_json"]).startswith(b"\x89PNG")


async def test_models_and_too_short_timeouts_answer_as_their_clients_read_them(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        listing = await http.get("/v1/models", headers=bearer("not-a-key"))
        assert listing.status_code == 401
        assert listing.json()["error"]["code"] == "UNAUTHENTICATED"
        # No run of flux-tiny fits in a millisecond: no retry with this timeout can pass.
        body = {"model": "flux-tiny", "prompt": "x", "timeout_ms": 1}
        for path in ("/v1/jobs", "/v1/videos"):
            sent = {**body, "model": "wan-tiny"} if path == "/v1/videos" else body
            answer = await http.post(path, headers=bearer(KEY_A), json=sent)
            assert answer.status_code == 400, (path, answer.text)
            assert answer.headers["x-should-retry"] == "false"
            assert "this job needs at least" in answer.text
