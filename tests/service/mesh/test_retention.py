"""Finished jobs, their artifacts, stray checkpoints and results no job names any more are
cleaned up after the retention."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.removal import ORPHAN_RESULT_MARGIN_S
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_webhooks import hook_settings
from tests.webhook_receiver import webhook_receiver


@pytest.mark.parametrize("in_store_max_bytes", [0, 256 * 1024], ids=["file", "in-store"])
async def test_retention_purges_jobs_artifacts_and_old_checkpoints(
    tmp_path: Path, models_dir, in_store_max_bytes: int
):
    checkpoints = tmp_path / "artifacts" / "checkpoints"
    checkpoints.mkdir(parents=True)
    stray = checkpoints / "lost-job-step3.pt"
    stray.write_bytes(b"old")
    old = time.time() - 3600
    os.utime(stray, (old, old))
    # A result whose job was deleted without it (a crash in between), older than the
    # retention and its margin; a result written since is not the sweep's.
    left_over = tmp_path / "artifacts" / f"{7:032x}.png"
    left_over.write_bytes(b"orphan")
    older = time.time() - ORPHAN_RESULT_MARGIN_S - 60
    os.utime(left_over, (older, older))
    recent = tmp_path / "artifacts" / f"{8:032x}.png"
    recent.write_bytes(b"young")
    younger = time.time() - ORPHAN_RESULT_MARGIN_S / 2
    os.utime(recent, (younger, younger))
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        scheduler={"retention_s": 1.0, "artifacts": {"in_store_max_bytes": in_store_max_bytes}},
    )
    try:
        stub = mesh.gateway_stub()
        events = [
            e async for e in stub.Generate(common_pb2.GenerateRequest(model="echo", prompt="x"))
        ]
        job_id = events[-1].job_id
        runtime = mesh.scheduler.runtime
        artifact = runtime.results[job_id].path
        tenant = mesh.core.jobs[job_id].tenant
        assert runtime.result_usage.held(tenant) == runtime.results[job_id].size_bytes > 0
        assert await runtime.artifacts.exists(artifact)
        # A small result is kept in the job store unless that is turned off.
        assert Path(artifact).is_file() == (in_store_max_bytes == 0)
        for _ in range(60):
            if job_id not in mesh.core.jobs:
                break
            await asyncio.sleep(0.1)
        assert not await runtime.artifacts.exists(artifact)
        assert not Path(artifact).exists()
        assert not await runtime.store.has_result(job_id)
        assert not stray.exists()
        assert not left_over.exists() and recent.exists()
        assert await mesh.scheduler.runtime.store.get(job_id) is None
        assert runtime.result_usage.held(tenant) == 0
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await stop_mesh(mesh)


async def test_a_webhook_still_retrying_stops_when_its_job_is_purged(tmp_path: Path, models_dir):
    async with webhook_receiver() as receiver:
        receiver.default_status = 500
        mesh = await start_mesh(
            tmp_path,
            models_dir,
            [["echo"]],
            scheduler={"retention_s": 1.0},
            webhooks=hook_settings(receiver, max_attempts=100),
        )
        try:
            hook = common_pb2.Webhook(url=receiver.url, events=["completed"])
            request = common_pb2.GenerateRequest(model="echo", prompt="x", webhook=hook)
            events = [e async for e in mesh.gateway_stub().Generate(request)]
            job_id = events[-1].job_id
            await receiver.wait_for(2)
            runtime = mesh.scheduler.runtime
            for _ in range(100):
                if await runtime.store.get(job_id) is None:
                    break
                await asyncio.sleep(0.1)
            assert await runtime.store.get(job_id) is None
            attempts = len(receiver.received)
            await asyncio.sleep(1.0)  # backoffs of 0.2 to 0.4 s: attempts would go on
            await runtime.writer.flush(5.0)
            assert len(receiver.received) <= attempts + 1  # one may have been on its way
            assert await runtime.store.deliveries_of(job_id) == []
        finally:
            await stop_mesh(mesh)
