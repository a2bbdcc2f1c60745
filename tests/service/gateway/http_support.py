"""An in-process mesh with its HTTP face on a free port, API keys for three tenants, and
helpers to call it over real HTTP (uvicorn on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import io
import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio
from openai.types import Video
from PIL import Image
from prometheus_client import REGISTRY

from mediamesh.gateway.core.tenancy import hash_key
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, NO_SPOT_WAIT

KEY_SLOW = "key-of-a-slow-tenant"
# A tenant whose rate allows three jobs and then almost none.
KEY_THREE = "key-of-a-tenant-with-burst-3"
PAGE_ORIGIN = "http://page.example"
# The gateway's message limit in this mesh, and so the HTTP body limit.
MAX_BODY = 1024 * 1024
HTTP_GATEWAY = {
    "http_port": 0,
    "max_message_bytes": MAX_BODY,
    "http": {"cors_origins": [PAGE_ORIGIN]},
    "api_keys": [
        {"sha256": hash_key(KEY_A), "tenant": "a"},
        {"sha256": hash_key(KEY_B), "tenant": "b"},
        {"sha256": hash_key(KEY_SLOW), "tenant": "slow"},
        {"sha256": hash_key(KEY_THREE), "tenant": "three"},
    ],
    "tenants": {
        "a": {},
        "b": {"allowed_models": ["echo"]},
        "slow": {"requests_per_second": 0.01, "burst": 1},
        "three": {"requests_per_second": 0.01, "burst": 3},
    },
}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http_mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> AsyncIterator[InProcessMesh]:
    """flux-tiny, its image-to-image variant and echo on one worker, wan-tiny on another, the
    HTTP face on a free port."""
    mesh = await start_mesh(
        tmp_path_factory.mktemp("http"),
        models_dir,
        [["flux-tiny", "flux-img2img-tiny", "echo"], ["wan-tiny"]],
        gateway=HTTP_GATEWAY,
        scheduler=NO_SPOT_WAIT,
    )
    yield mesh
    await stop_mesh(mesh)


def base_url(mesh: InProcessMesh) -> str:
    return f"http://127.0.0.1:{mesh.gateway.http_port}"


@asynccontextmanager
async def http_client(
    mesh: InProcessMesh, key: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the mesh's face; with `key`, sent on every request."""
    headers = bearer(key) if key is not None else None
    async with httpx.AsyncClient(base_url=base_url(mesh), timeout=120, headers=headers) as client:
        yield client


async def read_events(
    client: httpx.AsyncClient, job_id: str, key: str, last_event_id: str | None = None
) -> list[dict]:
    """Every frame of the job's event stream until it ends: {id, event, data}."""
    headers = bearer(key)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    async with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return [frame async for frame in frames(response)]


async def frames(response: httpx.Response) -> AsyncIterator[dict]:
    """The SSE frames of `response` as {id, event, data} (frames without data are skipped)."""
    frame: dict = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in frame:
                yield frame
            frame = {}
            continue
        name, _, value = line.partition(": ")
        if name == "data":
            frame["data"] = json.loads(value)
        elif name in ("id", "event"):
            frame[name] = value


def openai_client(mesh: InProcessMesh, key: str = KEY_A) -> openai.AsyncOpenAI:
    """The official client against the mesh's OpenAI-compatible routes, without retries."""
    warnings.simplefilter("ignore", DeprecationWarning)  # the client marks videos deprecated
    return openai.AsyncOpenAI(base_url=f"{base_url(mesh)}/v1", api_key=key, max_retries=0)


def png_bytes(width: int = 64, height: int = 64, *, alpha: bool = False) -> bytes:
    """A plain red PNG of that size; with `alpha`, fully transparent (an OpenAI edit mask
    that marks the whole image for editing)."""
    picture = io.BytesIO()
    if alpha:
        Image.new("RGBA", (width, height), (200, 30, 30, 0)).save(picture, "PNG")
    else:
        Image.new("RGB", (width, height), (200, 30, 30)).save(picture, "PNG")
    return picture.getvalue()


async def video_when_ended(client: openai.AsyncOpenAI, video_id: str) -> Video:
    """The video once it has completed or failed (as it stands after 60 s otherwise)."""
    for _ in range(600):
        video = await client.videos.retrieve(video_id)
        if video.status in ("completed", "failed"):
            break
        await asyncio.sleep(0.1)
    return video


def scheduler_calls(method: str) -> float:
    """The calls the scheduler has handled so far of its rpc `method` (every mesh of the
    test process counts into the same registry)."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "mediamesh_rpc_requests_total"
        and sample.labels.get("method") == method
        and sample.labels.get("service") == "mediamesh.v1.Scheduler"
    )
