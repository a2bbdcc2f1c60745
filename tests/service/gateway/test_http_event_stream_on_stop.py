"""A gateway stopping (SIGTERM, as on every rollout) with an event stream open on a queued
job ends that stream at once and cleanly, with no ERROR logged, and the client resumes from
its last event id; before, the stream outlasted gateway.shutdown_grace_s and uvicorn
cancelled it with "Exception in ASGI application" and a traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.http_support import frames

pytestmark = pytest.mark.timeout(120)

GRACE_S = 5.0


async def test_a_queued_jobs_event_stream_ends_cleanly_when_the_gateway_stops(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Only echo is hosted: a flux-tiny job stays queued.
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway={"http_port": 0})
    try:
        assert mesh.gateway.http is not None
        base = f"http://127.0.0.1:{mesh.gateway.http.port}"
        async with httpx.AsyncClient(base_url=base, timeout=GRACE_S * 4) as client:
            body = {"model": "flux-tiny", "prompt": "x", "steps": 1}
            answer = await client.post("/v1/jobs", json=body)
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["job_id"]
            seen: list[dict] = []
            async with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
                assert response.status_code == 200
                caplog.set_level(logging.INFO)
                async for frame in frames(response):
                    seen.append(frame)
                    if frame["event"] == "queued":
                        started = time.monotonic()
                        stopping = asyncio.ensure_future(mesh.gateway.http.stop(GRACE_S))
                # Reaching here means the stream ended with its last chunk: a dropped
                # connection raises httpx.RemoteProtocolError.
            await stopping
        took = time.monotonic() - started
        assert [f["event"] for f in seen] == ["queued"], seen
        assert seen[0]["id"], "no id to resume from"
        assert took < GRACE_S / 2, f"the stream held the stop {took:.1f} s"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert not errors, errors
    finally:
        await stop_mesh(mesh)
