"""Finished jobs, their artifacts and stray checkpoints are cleaned up after the retention."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from tests.service.conftest import start_mesh, stop_mesh


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
        assert await mesh.scheduler.runtime.store.get(job_id) is None
        assert runtime.result_usage.held(tenant) == 0
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await stop_mesh(mesh)
