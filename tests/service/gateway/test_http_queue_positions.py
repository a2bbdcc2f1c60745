"""A job waiting in the queue is told its position again as the jobs ahead of it leave: the
event stream (and so the web page) does not stay on the position it entered the queue at."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from mediamesh.scheduler import watching
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.http_support import frames

pytestmark = pytest.mark.timeout(300)


@pytest_asyncio.fixture
async def mesh(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[InProcessMesh]:
    # Refreshed more often than once a second, so that a fast moment of the machine, when
    # the middle job runs for less than a second, still shows the position falling.
    monkeypatch.setattr(watching, "QUEUE_POSITION_REFRESH_S", 0.1)
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], gateway={"http_port": 0})
    yield mesh
    await stop_mesh(mesh)


async def test_a_waiting_job_hears_its_position_fall(mesh: InProcessMesh) -> None:
    base = f"http://127.0.0.1:{mesh.gateway.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        # Shapes differ, so no two share a batch: each waits for the one before it, and the
        # middle one runs for seconds, long past the refresh of positions.
        ids = []
        for size, steps in ((512, 10), (480, 50), (128, 4)):
            body = {"model": "flux-tiny", "prompt": "x", "width": size, "height": size}
            answer = await client.post("/v1/jobs", json={**body, "steps": steps})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
        last = ids[-1]
        async with client.stream("GET", f"/v1/jobs/{last}/events") as response:
            assert response.status_code == 200
            # A proxy may neither cache the stream nor rewrite (and so hold back) its events.
            assert response.headers["cache-control"] == "no-cache, no-transform"
            seen = [frame async for frame in frames(response)]
    queued = [f["data"]["position"] for f in seen if f["event"] == "queued"]
    assert queued and queued[0] >= 1, seen
    assert min(queued[1:], default=queued[0]) < queued[0], queued
    # Ids only grow, so a reconnect resumes after the latest position.
    assert [f["event"] for f in seen][-1] == "result"
    assert len({f["id"] for f in seen}) == len(seen)
