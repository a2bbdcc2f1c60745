"""The official `openai` client, unmodified, against the gateway's OpenAI-compatible API."""

from __future__ import annotations

import asyncio
import base64
import io
import warnings

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig
from mediamesh.gateway.main import start_gateway
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    png_bytes,
    scheduler_calls,
    video_when_ended,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
PNG = b"\x89PNG\r\n\x1a\n"


async def test_images_generate_as_b64_json_and_as_url(http_mesh: InProcessMesh):  # noqa: F811
    client = openai_client(http_mesh)
    inline = await client.images.generate(
        model="flux-tiny",
        prompt="a red fox",
        n=2,
        size="64x64",
        response_format="b64_json",
        extra_body={"steps": 2, "seed": 5},
    )
    images = [base64.b64decode(d.b64_json or "") for d in inline.data or []]
    assert len(images) == 2 and all(i.startswith(PNG) for i in images)
    assert images[0] != images[1], "n images get seeds seed, seed + 1"
    linked = await client.images.generate(
        model="flux-tiny", prompt="a red fox", size="64x64", response_format="url",
        extra_body={"steps": 2, "seed": 5},
    )  # fmt: skip
    url = (linked.data or [])[0].url or ""
    async with httpx.AsyncClient(timeout=60) as http:
        fetched = await http.get(url, headers=bearer(KEY_A))
    # The n=2 pair ran as one batch and this one alone: batched matmuls round differently,
    # so the same seed gives the same picture within 2 of 255 levels, not the same bytes.
    alone, batched = (
        np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
        for data in (fetched.content, images[0])
    )
    assert np.abs(alone - batched).max() <= 2, "the same seed gives the same image"
    await client.close()


async def test_a_small_b64_image_comes_with_the_jobs_end_and_a_large_one_is_downloaded(
    http_mesh: InProcessMesh,  # noqa: F811
):
    client = openai_client(http_mesh)
    upstream = http_mesh.gateway.upstream
    assert upstream is not None

    async def one_image() -> bytes:
        answer = await client.images.generate(
            model="flux-tiny", prompt="a fox", size="64x64", response_format="b64_json",
            extra_body={"steps": 1, "seed": 3},
        )  # fmt: skip
        return base64.b64decode((answer.data or [])[0].b64_json or "")

    downloads = scheduler_calls("Download")
    calls = {m: scheduler_calls(m) for m in ("Submit", "GetJob", "Watch")}
    small = await one_image()
    assert small.startswith(PNG)
    assert scheduler_calls("Download") == downloads, "inline bytes need no download"
    # The job went over the gateway's JobLink stream: no call of its own.
    assert {m: scheduler_calls(m) - n for m, n in calls.items()} == {
        "Submit": 0,
        "GetJob": 0,
        "Watch": 0,
    }
    limit = upstream.inline_limit
    upstream.inline_limit = 16  # every result is now too large to come inline
    try:
        large = await one_image()
    finally:
        upstream.inline_limit = limit
    assert large == small
    assert scheduler_calls("Download") == downloads + 1
    await client.close()


async def test_openai_errors_reach_the_client_with_their_status(http_mesh: InProcessMesh):  # noqa: F811
    client = openai_client(http_mesh)
    with pytest.raises(openai.BadRequestError, match="size"):
        await client.images.generate(model="flux-tiny", prompt="fox", size="big")
    with pytest.raises(openai.AuthenticationError):
        await openai_client(http_mesh, "wrong").images.generate(model="flux-tiny", prompt="fox")
    with pytest.raises(openai.PermissionDeniedError):
        await openai_client(http_mesh, KEY_B).images.generate(model="flux-tiny", prompt="fox")
    with pytest.raises(openai.NotFoundError):
        await client.images.generate(model="no-such-model", prompt="fox")
    await client.close()


async def test_image_edits_run_on_a_model_that_takes_an_image(http_mesh: InProcessMesh):  # noqa: F811
    client = openai_client(http_mesh)
    edited = await client.images.edit(
        model="flux-img2img-tiny",
        prompt="make it blue",
        image=("in.png", png_bytes(), "image/png"),
        extra_body={"steps": 2},
    )
    assert base64.b64decode((edited.data or [])[0].b64_json or "").startswith(PNG)
    with pytest.raises(openai.BadRequestError, match="takes no image input"):
        await client.images.edit(
            model="flux-tiny",
            prompt="make it blue",
            image=("in.png", png_bytes(), "image/png"),
        )
    await client.close()


async def test_videos_create_retrieve_download_and_delete(http_mesh: InProcessMesh):  # noqa: F811
    client = openai_client(http_mesh)
    warnings.simplefilter("ignore", DeprecationWarning)  # the client marks videos deprecated
    video = await client.videos.create(
        model="wan-tiny",
        prompt="waves",
        size="64x64",
        extra_body={"steps": 2},  # type: ignore[arg-type]
    )
    assert video.object == "video" and video.status in ("queued", "in_progress")
    assert video.size == "64x64"
    video = await video_when_ended(client, video.id)
    assert video.status == "completed", video.error
    assert video.progress == 100 and video.completed_at
    # Forgotten with its content one retention_s (a day by default) after it ended.
    assert video.expires_at == video.completed_at + 24 * 3600
    content = await client.videos.download_content(video.id)
    data = content.read()
    assert len(data) > 100
    async with httpx.AsyncClient(timeout=60) as http:
        direct = await http.get(
            f"{base_url(http_mesh)}/v1/jobs/{video.id}/result", headers=bearer(KEY_A)
        )
    assert direct.content == data and direct.headers["content-type"].startswith("video/")
    # An ended video is deleted, its content with it.
    deleted = await client.videos.delete(video.id)
    assert deleted.deleted and deleted.id == video.id and deleted.object == "video.deleted"
    with pytest.raises(openai.NotFoundError):
        await client.videos.retrieve(video.id)
    with pytest.raises(openai.NotFoundError):
        await client.videos.download_content(video.id)
    async with httpx.AsyncClient(timeout=60) as http:
        direct = await http.get(
            f"{base_url(http_mesh)}/v1/jobs/{video.id}/result", headers=bearer(KEY_A)
        )
    assert direct.status_code == 404
    # One that has not ended is cancelled, and stays readable until it is deleted in turn.
    long = await client.videos.create(model="wan-tiny", prompt="long", extra_body={"steps": 50})
    deleted = await client.videos.delete(long.id)
    assert deleted.deleted and deleted.id == long.id and deleted.object == "video.deleted"
    for _ in range(300):
        long = await client.videos.retrieve(long.id)
        if long.status == "failed":
            break
        await asyncio.sleep(0.1)
    assert long.status == "failed" and long.error and long.error.code == "CANCELLED"
    assert (await client.videos.delete(long.id)).deleted
    with pytest.raises(openai.NotFoundError):
        await client.videos.retrieve(long.id)
    await client.close()


async def test_a_video_reads_the_same_from_a_replica_that_never_saw_the_request(
    http_mesh: InProcessMesh,  # noqa: F811
):
    client = openai_client(http_mesh)
    warnings.simplefilter("ignore", DeprecationWarning)  # the client marks videos deprecated
    # 1 s at 9 fps is 9 frames, which wan-tiny's (num_frames - 1) % 4 == 0 allows.
    asked = await client.videos.create(
        model="wan-tiny",
        prompt="tides under a full moon",
        size="80x48",
        seconds="1",  # type: ignore[arg-type]
        extra_body={"steps": 2, "fps": 9},  # type: ignore[arg-type]
    )
    plain = await client.videos.create(
        model="wan-tiny",
        prompt="defaults",
        extra_body={"steps": 2},  # type: ignore[arg-type]
    )
    await client.close()
    # A second replica over the same scheduler, as behind a load balancer or after a restart.
    g = http_mesh.config.gateway.model_copy(update={"port": 0, "http_port": 0})
    replica = await start_gateway(MeshConfig(gateway=g, workers=[]), load_registry())
    other = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{replica.http_port}/v1", api_key=KEY_A, max_retries=0
    )
    try:
        video = await video_when_ended(other, asked.id)
        assert video.status == "completed", video.error
        assert (video.prompt, video.size, video.seconds) == (
            "tides under a full moon",
            "80x48",
            "1",
        )
        # Unasked size and length are the model's defaults: 64x64, 5 frames at 8 fps.
        defaults = await other.videos.retrieve(plain.id)
        assert (defaults.prompt, defaults.size, defaults.seconds) == ("defaults", "64x64", "0.625")
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{replica.http_port}", timeout=60
        ) as http:
            job = (await http.get(f"/v1/jobs/{asked.id}", headers=bearer(KEY_A))).json()
        assert {k: job[k] for k in ("prompt", "steps", "width", "height", "num_frames", "fps")} == {
            "prompt": "tides under a full moon",
            "steps": 2,
            "width": 80,
            "height": 48,
            "num_frames": 9,
            "fps": 9,
        }
        await video_when_ended(other, plain.id)
        assert (await other.videos.delete(plain.id)).deleted
        with pytest.raises(openai.NotFoundError):
            await openai_client(http_mesh).videos.retrieve(plain.id)
    finally:
        await other.close()
        await replica.stop(0)
