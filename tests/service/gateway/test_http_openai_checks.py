"""What the OpenAI-compatible routes refuse, and how: each error names the OpenAI field the
client sent (`param`) and the limit; `seconds` becomes a frame count the model accepts."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable

import httpx
import openai
import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.limits import MAX_SEED
from mediamesh.common.registry import load_registry
from mediamesh.gateway.http.openai_videos import frames_for
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    png_bytes,
    video_when_ended,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
PNG = b"\x89PNG\r\n\x1a\n"


async def test_seconds_become_the_fewest_frames_the_model_accepts() -> None:
    registry = load_registry()
    # Wan takes 4k + 1 frames, CogVideoX 8k + 1 (its VAE needs an odd count of latent frames).
    for name, multiple, short in (("wan-tiny", 4, 5), ("cogvideox-tiny", 8, 9)):
        spec = registry.get(name)
        assert spec is not None and spec.limits.frame_multiple == multiple
        frames = {s: frames_for(s, 8, spec) for s in ("1", "2", "4", "0.625", "0.01", "4.125")}
        assert frames == {"1": 9, "2": 17, "4": 33, "0.625": short, "0.01": 1, "4.125": 33}
    # 0.1 s at 30 fps is 3 frames exactly, though 0.1 * 30 is 3.0000000000000004.
    wan = registry.get("wan-tiny")
    assert wan is not None and frames_for("0.1", 30, wan) == 5
    any_count = wan.model_copy(
        update={"limits": wan.limits.model_copy(update={"frame_multiple": 1})}
    )
    assert frames_for("0.1", 30, any_count) == 3
    # 33 frames at 9 fps last 3.666... s: the limit the error gives is one that is served.
    assert frames_for("3.666", 9, wan) == 33
    with pytest.raises(InvalidArgument, match=r"^seconds: .* <= 3\.666 \(33 frames at 9 fps\)$"):
        frames_for("3.667", 9, wan)


async def test_whole_seconds_make_a_video_on_a_4k_plus_1_model(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for seconds, frames in (("1", 9), ("2", 17), ("4", 33)):
            # As curl -F sends it, and at the model's own 8 fps; long enough to cancel.
            form = {"model": "wan-tiny", "prompt": "x", "seconds": seconds, "steps": "50"}
            created = await http.post(
                "/v1/videos",
                headers=bearer(KEY_A),
                files={name: (None, value) for name, value in form.items()},
            )
            assert created.status_code == 200, created.text
            video = created.json()
            assert video["seconds"] == f"{frames / 8:g}"
            job = (await http.get(f"/v1/jobs/{video['id']}", headers=bearer(KEY_A))).json()
            assert (job["num_frames"], job["fps"]) == (frames, 8)
            cancelled = await http.delete(f"/v1/videos/{video['id']}", headers=bearer(KEY_A))
            assert cancelled.json() == {
                "id": video["id"],
                "object": "video.deleted",
                "deleted": True,
            }


async def test_seconds_past_the_longest_clip_name_seconds_and_the_limit(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.videos.create(model="wan-tiny", prompt="x", seconds="8")
    assert refused.value.param == "seconds"
    assert "4.125 (33 frames at 8 fps)" in refused.value.message
    for bad in ("0", "-1", "nan", "inf", "1e308", "soon"):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.videos.create(model="wan-tiny", prompt="x", seconds=bad)  # type: ignore[arg-type]
        assert refused.value.param == "seconds", bad
    with pytest.raises(openai.BadRequestError) as refused:
        await client.videos.create(
            model="wan-tiny",
            prompt="x",
            seconds="1",  # type: ignore[arg-type]
            extra_body={"num_frames": 5},
        )
    assert refused.value.param == "seconds" and "not both" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        await client.videos.create(
            model="wan-tiny",
            prompt="x",
            seconds="1",  # type: ignore[arg-type]
            extra_body={"fps": "fast"},
        )
    assert refused.value.param == "fps" and "1..60" in refused.value.message
    await client.close()


async def test_each_route_serves_only_its_own_kind_of_model(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.generate(model="wan-tiny", prompt="fox", extra_body={"steps": 2})
    assert refused.value.param == "model"
    assert "'wan-tiny' makes video" in refused.value.message
    assert "image models: flux-tiny" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.generate(model="stable-audio-tiny", prompt="rain")
    assert refused.value.param == "model" and "makes audio" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.edit(
            model="wan-tiny", prompt="blue", image=("in.png", png_bytes(), "image/png")
        )  # fmt: skip
    assert refused.value.param == "model" and "makes video" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        await client.videos.create(model="flux-tiny", prompt="waves")
    assert refused.value.param == "model"
    assert "'flux-tiny' makes image" in refused.value.message
    assert "video models: wan-tiny" in refused.value.message
    await client.close()


async def test_edits_without_a_model_take_the_first_model_with_an_image_input(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    edited = await client.images.edit(
        prompt="make it blue", image=("in.png", png_bytes(), "image/png"), extra_body={"steps": 2}
    )
    assert base64.b64decode((edited.data or [])[0].b64_json or "").startswith(PNG)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.edit(
            model="flux-tiny", prompt="blue", image=("in.png", png_bytes(), "image/png")
        )  # fmt: skip
    assert refused.value.param == "image"
    assert "takes no image input; image models that do: " in refused.value.message
    assert "flux-img2img-tiny" in refused.value.message
    await client.close()


async def test_several_images_to_edit_are_refused_not_dropped(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    two = [("a.png", png_bytes(), "image/png"), ("b.png", png_bytes(32, 32), "image/png")]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.images.edit(model="flux-img2img-tiny", prompt="blue", image=two)
    assert refused.value.param == "image"
    assert "image: sent 2 times; send it once" in refused.value.message
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for spellings in (("image", "image"), ("image", "image[]")):
            answer = await http.post(
                "/v1/images/edits",
                headers=bearer(KEY_A),
                data={"prompt": "blue", "model": "flux-img2img-tiny"},
                files=[(name, (f"{name}.png", png_bytes(), "image/png")) for name in spellings],
            )  # fmt: skip
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == "image"
    await client.close()


async def test_errors_name_the_openai_field_the_client_sent(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)

    async def param_of(call: Awaitable[object]) -> tuple[str | None, str]:
        with pytest.raises(openai.BadRequestError) as refused:
            await call
        body = refused.value.body
        assert isinstance(body, dict)
        return refused.value.param, body["message"]

    param, message = await param_of(
        client.images.generate(model="flux-tiny", prompt="x", size="1x1")
    )
    assert param == "size" and message.startswith("size: ")
    # Well formed, only too large: the range error, with the limit.
    param, message = await param_of(
        client.images.generate(model="flux-tiny", prompt="x", size="100000x64")
    )
    assert param == "size" and "out of range" in message and "16..512" in message
    param, message = await param_of(
        client.images.generate(model="flux-tiny", prompt="x", size="9" * 5000 + "x64")
    )
    assert param == "size" and "out of range" in message
    param, message = await param_of(
        client.images.generate(model="flux-tiny", prompt="x", size="72x64")
    )
    assert (param, message) == ("size", "size: width 72 must be a multiple of 16 for flux-tiny")
    param, _ = await param_of(
        client.images.generate(model="flux-tiny", prompt="x", output_compression=50)
    )
    assert param == "output_compression"
    for compression, limit in (
        (0, "greater than or equal to 1"),
        (101, "less than or equal to 100"),
    ):
        param, message = await param_of(
            client.images.generate(
                model="flux-tiny", prompt="x", output_format="jpeg", output_compression=compression
            )
        )
        assert (param, message) == (
            "output_compression",
            f"output_compression: Input should be {limit}",
        )
    # sdxl-inpaint-tiny takes a mask, which must be the image's size: checked at admission.
    param, message = await param_of(
        client.images.edit(
            model="sdxl-inpaint-tiny", prompt="x", image=("in.png", png_bytes(), "image/png"),
            mask=("mask.png", png_bytes(64, 32, alpha=True), "image/png"),
        )
    )  # fmt: skip
    assert param == "mask" and "64x32" in message
    # OpenAI marks the area to edit by transparency: a mask without alpha says nothing.
    param, message = await param_of(
        client.images.edit(
            model="sdxl-inpaint-tiny", prompt="x", image=("in.png", png_bytes(), "image/png"),
            mask=("mask.png", png_bytes(), "image/png"),
        )
    )  # fmt: skip
    assert param == "mask" and "no alpha channel" in message
    param, message = await param_of(
        client.images.edit(
            model="flux-img2img-tiny", prompt="x", image=("in.png", png_bytes(), "image/png"),
            mask=("mask.png", png_bytes(), "image/png"),
        )
    )  # fmt: skip
    assert param == "mask" and "sdxl-inpaint-tiny" in message
    param, _ = await param_of(
        client.images.edit(
            model="flux-img2img-tiny", prompt="x", image=("in.png", b"not a picture", "image/png")
        )
    )
    assert param == "image"
    param, _ = await param_of(
        client.videos.create(model="wan-tiny", prompt="x", size="1x1")  # type: ignore[arg-type]
    )
    assert param == "size"
    param, message = await param_of(
        client.videos.create(
            model="wan-tiny", prompt="x", input_reference=("in.png", png_bytes(), "image/png")
        )
    )
    assert param == "input_reference" and "cogvideox-i2v-tiny" in message
    param, _ = await param_of(
        client.videos.create(
            model="cogvideox-i2v-tiny", prompt="x",
            input_reference=("in.png", b"not a picture", "image/png"),
        )
    )  # fmt: skip
    assert param == "input_reference"
    await client.close()


async def test_an_ended_video_is_deleted_with_its_content_and_listing(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    video = await client.videos.create(
        model="wan-tiny",
        prompt="waves",
        extra_body={"steps": 2},
    )
    video = await video_when_ended(client, video.id)
    assert video.status == "completed", video.error
    other = openai_client(http_mesh, KEY_B)
    with pytest.raises(openai.NotFoundError):
        await other.videos.delete(video.id)
    await other.close()
    deleted = await client.videos.delete(video.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (video.id, "video.deleted", True)
    with pytest.raises(openai.NotFoundError) as gone:
        await client.videos.retrieve(video.id)
    assert gone.value.param == "video_id"
    with pytest.raises(openai.NotFoundError):
        await client.videos.download_content(video.id)
    with pytest.raises(openai.NotFoundError):
        await client.videos.delete(video.id)
    assert video.id not in [v.id async for v in client.videos.list()]
    await client.close()


async def test_the_end_user_is_logged_with_the_jobs_it_made(
    http_mesh: InProcessMesh,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = openai_client(http_mesh)
    caplog.set_level(logging.INFO, logger="mediamesh.gateway.openai")
    made = await client.images.generate(
        model="flux-tiny", prompt="x", n=2, user="end-user-7", extra_body={"steps": 1}
    )
    edited = await client.images.edit(
        model="flux-img2img-tiny", prompt="x", image=("in.png", png_bytes(), "image/png"),
        user="end-user-8", extra_body={"steps": 2},
    )  # fmt: skip
    assert len(made.data or []) == 2 and len(edited.data or []) == 1
    assert made.output_format == edited.output_format == "png"
    lines = [r for r in caplog.records if r.name == "mediamesh.gateway.openai"]
    fields = [r.fields for r in lines]
    assert [(f["route"], f["end_user"], len(f["jobs"])) for f in fields] == [
        ("/v1/images/generations", "end-user-7", 2),
        ("/v1/images/edits", "end-user-8", 1),
    ]
    assert all(f["tenant"] for f in fields)
    # Unbounded strings stay out of the logs: the field and its bound in the 400.
    for call in (
        client.images.generate(model="flux-tiny", prompt="x", user="u" * 257),
        client.images.edit(
            model="flux-img2img-tiny", prompt="x", image=("in.png", png_bytes(), "image/png"),
            user="u" * 257,
        ),
    ):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            await call
        assert refused.value.param == "user" and "256" in refused.value.message
    await client.close()


async def test_each_edited_image_gets_its_own_seed(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    edited = await client.images.edit(
        model="flux-img2img-tiny", prompt="seeded edit", n=2,
        image=("in.png", png_bytes(), "image/png"), extra_body={"seed": 5, "steps": 2},
    )  # fmt: skip
    images = [base64.b64decode(d.b64_json or "") for d in edited.data or []]
    assert len(images) == 2 and images[0] != images[1]
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        page = await http.get("/v1/jobs", headers=bearer(KEY_A), params={"limit": 10})
    seeds = sorted(j["seed"] for j in page.json()["data"] if j["prompt"] == "seeded edit")
    assert seeds == ["5", "6"]  # 64-bit numbers are strings in JSON, as protobuf maps them
    top = 2**63 - 1
    for call in (
        client.images.generate(model="flux-tiny", prompt="x", n=2, extra_body={"seed": top}),
        client.images.edit(
            model="flux-img2img-tiny", prompt="x", n=2, image=("in.png", png_bytes(), "image/png"),
            extra_body={"seed": top},
        ),
    ):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            await call
        assert refused.value.param == "seed"
        assert f"at most {top - 1}" in refused.value.message
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["type"] == "invalid_request_error"
    await client.close()


async def test_edits_take_output_compression_as_generations_do(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        form = {"prompt": "x", "model": "flux-img2img-tiny", "steps": "2"}
        image = {"image": ("in.png", png_bytes(), "image/png")}
        jpeg = await http.post(
            "/v1/images/edits",
            headers=bearer(KEY_A),
            data={**form, "output_format": "jpeg", "output_compression": "40"},
            files=image,
        )
        assert jpeg.status_code == 200, jpeg.text
        assert jpeg.json()["output_format"] == "jpeg"
        assert base64.b64decode(jpeg.json()["data"][0]["b64_json"]).startswith(b"\xff\xd8")
        png = await http.post(
            "/v1/images/edits", headers=bearer(KEY_A), data={**form, "output_compression": "40"},
            files=image,
        )  # fmt: skip
        assert png.status_code == 400 and png.json()["error"]["param"] == "output_compression"


async def test_a_client_that_leaves_cancels_the_images_it_asked_for(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    # A model in the registry that no worker of this mesh hosts: its jobs wait in the queue
    # (as for a pool scaled to zero) until they are cancelled.
    body = {"model": "sdxl-tiny", "prompt": "left behind", "n": 2, "steps": 2}
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=1.5) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/v1/images/generations", headers=bearer(KEY_A), json=body)
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for _ in range(100):
            page = await http.get("/v1/jobs", headers=bearer(KEY_A), params={"limit": 10})
            mine = [j for j in page.json()["data"] if j["prompt"] == "left behind"]
            if len(mine) == 2 and all(j["state"] == "CANCELLED" for j in mine):
                break
            await asyncio.sleep(0.2)
        assert [j["state"] for j in mine] == ["CANCELLED", "CANCELLED"], mine


async def test_video_routes_serve_only_videos(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        made = await http.post(
            "/v1/jobs", headers=bearer(KEY_A), json={"model": "echo", "prompt": "x"}
        )
        job_id = made.json()["job_id"]
        for method, path in (
            ("GET", f"/v1/videos/{job_id}"),
            ("GET", f"/v1/videos/{job_id}/content"),
            ("DELETE", f"/v1/videos/{job_id}"),
        ):
            answer = await http.request(method, path, headers=bearer(KEY_A))
            assert answer.status_code == 404, (path, answer.text)
            assert answer.json()["error"]["param"] == "video_id"
            assert "not of a video model" in answer.json()["error"]["message"]
        job = (await http.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))).json()
        assert job["state"] != "CANCELLED"


async def test_the_default_model_is_one_the_tenant_may_use(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    # Tenant b may use echo alone; flux-tiny comes first among the image models.
    client = openai_client(http_mesh, KEY_B)
    made = await client.images.generate(prompt="x", extra_body={"steps": 1})
    assert base64.b64decode((made.data or [])[0].b64_json or "").startswith(PNG)
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        listed = await http.get("/v1/jobs", headers=bearer(KEY_B), params={"limit": 1})
        assert listed.json()["data"][0]["model"] == "echo"
        # No model it may use takes an image: the refusal says so, not that it named one.
        answer = await http.post(
            "/v1/images/edits",
            headers=bearer(KEY_B),
            data={"prompt": "blue"},
            files={"image": ("in.png", png_bytes(), "image/png")},
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["message"] == (
            "model: required; tenant 'b' may use no image model that takes image input "
            "(it may use echo)"
        )
    await client.close()


async def test_values_the_routes_cannot_read_whole_are_refused_by_name(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    digits = "9" * 5000
    edit = {"model": "flux-img2img-tiny", "prompt": "x"}
    image = {"image": ("in.png", png_bytes(), "image/png")}
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:

        async def refused(path: str, **request: object) -> tuple[str, str]:
            answer = await http.post(path, headers=bearer(KEY_A), **request)  # type: ignore[arg-type]
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            return error["param"], error["message"]

        assert await refused("/v1/images/edits", data={**edit, "n": digits}, files=image) == (
            "n",
            "n: '9999999999999999'; allowed 1..10",
        )
        param, message = await refused(
            "/v1/images/edits", data={**edit, "seed": digits}, files=image
        )
        assert param == "seed" and message.endswith(f"out of range; allowed 0..{MAX_SEED}")
        assert await refused("/v1/images/edits", data={**edit, "steps": digits}, files=image) == (
            "steps",
            "steps: a number of more than 4300 digits",
        )
        # OpenAI's size beside the mesh's width: one would silently win over the other (on
        # image edits width is no field at all: test_openai_image_route_fields).
        video = {"model": "wan-tiny", "prompt": "x"}
        assert await refused("/v1/videos", data={**video, "size": "32x32", "width": "48"}) == (
            "size",
            "size: set size or width, not both",
        )
        answer = await http.post(
            "/v1/videos",
            headers=bearer(KEY_A),
            json={"model": "wan-tiny", "prompt": "x", "size": "32x32", "height": 48},
        )
        assert answer.status_code == 400 and answer.json()["error"]["message"] == (
            "size: set size or height, not both"
        )
        # A pipeline that makes the input image's size takes none.
        sized = {**edit, "model": "sdxl-img2img-tiny", "size": "32x32"}
        assert await refused("/v1/images/edits", data=sized, files=image) == (
            "size",
            "size: model 'sdxl-img2img-tiny' (StableDiffusionXLImg2ImgPipeline) takes no size; "
            "leave it unset or auto",
        )
        # JSON's own types only: true is not seed 1, nor "2" two images.
        for field, value in (("seed", True), ("n", "2"), ("steps", 1.5)):
            param, _ = await refused(
                "/v1/images/generations", json={"model": "echo", "prompt": "x", field: value}
            )
            assert param == field
