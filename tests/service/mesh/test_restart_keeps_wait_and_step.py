"""A restarted scheduler takes back a running job at the step its next attempt starts from
(0 without a checkpoint), and a queued job with the wait it had before the restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_delete_job import scheduler_of
from tests.service.mesh.test_job_trace_logs import submit_under

WAITED_S = 840.0


async def test_a_restart_resets_a_running_jobs_step_and_keeps_a_queued_jobs_wait(
    tmp_path: Path, models_dir: Path
) -> None:
    # No worker: both jobs are queued when the scheduler stops.
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        running = await submit_under(mesh, "0af7651916cd43dd8448eb211c80319c", "running")
        queued = await submit_under(mesh, "1af7651916cd43dd8448eb211c80319c", "queued")
    finally:
        await stop_mesh(mesh)
    # As a scheduler killed while `running` was at step 1 of its first attempt left them.
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
        db.execute(
            "UPDATE jobs SET state = 'RUNNING', attempts = 1, step = 1, worker_id = 'gone', "
            "batch_id = 'gone-b1' WHERE job_id = ?",
            (running,),
        )
        db.execute("UPDATE jobs SET created_at = created_at - ?", (WAITED_S,))
    db.close()

    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        stub = scheduler_of(mesh)
        request = scheduler_pb2.ScopedJobRequest(job_id=running, tenant="acme")
        info = await stub.GetJob(request, timeout=10)
        assert (info.state, info.attempts, info.step) == (common_pb2.QUEUED, 1, 0)
        async for event in stub.Watch(request, timeout=10):
            assert event.WhichOneof("event") == "queued"
            break
        assert mesh.core.oldest_wait_s("image") >= WAITED_S
        assert mesh.core.jobs[queued].enqueued_at == mesh.core.jobs[queued].created_at
    finally:
        await stop_mesh(mesh)
