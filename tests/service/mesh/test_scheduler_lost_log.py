"""A worker whose scheduler goes away says it lost the scheduler, not that it failed.

The worker writes its next heartbeat to a call the scheduler already ended; grpc raises
InvalidStateError there, which was logged as `scheduler session ... failed:
InvalidStateError('RPC already finished.')`, reading like a bug after every scheduler
restart.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.service.conftest import start_mesh


async def test_a_scheduler_that_stops_is_reported_as_lost(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.worker")
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], scheduler={"heartbeat_interval_s": 0.2}
    )
    worker = mesh.workers[0]
    try:
        await mesh.gateway.stop(0.1)
        await mesh.scheduler.stop(0.1)
        lines: list[str] = []
        for _ in range(60):
            lines = [r.getMessage() for r in caplog.records if r.name == "mediamesh.worker"]
            if any("lost the scheduler" in line for line in lines):
                break
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
    assert any("lost the scheduler at 127.0.0.1:" in line for line in lines), lines
    assert not any("InvalidStateError" in line for line in lines), lines
