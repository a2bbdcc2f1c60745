"""The warning for a batch whose worker is lost says what became of its jobs: a job that has
used its last attempt (max_attempts: 1) fails, and the line must not say it goes back in
line, as it did while the same job was logged `job failed ... gave up after 1 lost workers`."""

from __future__ import annotations

import logging

from mediamesh.common.generated.v1 import common_pb2
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_unreachable_worker import result_state
from tests.service.mesh.test_worker_gone import BreaksOnce


async def test_a_lost_worker_line_counts_the_jobs_that_failed_on_their_last_attempt(
    tmp_path, models_dir, caplog
):
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], scheduler={"max_attempts": 1})
    try:
        batches = mesh.scheduler.runtime.batches
        link = batches.link = BreaksOnce(batches.link)
        request = common_pb2.GenerateRequest(model="echo", prompt="x", steps=4)
        job_id = (await mesh.gateway_stub().Submit(request, timeout=10)).job_id
        assert await result_state(mesh, job_id) == "FAILED"
        (lost,) = [r.getMessage() for r in caplog.records if "lost its worker" in r.getMessage()]
        assert lost.startswith(f"batch {link.broken[0]} lost its worker w0 ")
        assert "0 requeued at the front of the line and 1 failed (max_attempts used up)" in lost
        assert "jobs go back" not in lost
    finally:
        await stop_mesh(mesh)
