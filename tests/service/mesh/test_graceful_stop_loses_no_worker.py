"""A scheduler stopped gracefully (SIGTERM, a rolling upgrade) closes its workers' streams
itself: that is no loss of a worker. Before, each graceful stop counted one lost worker
against every job running then, so that `max_attempts` restarts during one long job failed
it (`gave up after N lost workers`), though no worker was ever lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.main import start_scheduler
from mediamesh.scheduler.store.job_store import JobStore
from tests.service.conftest import start_mesh
from tests.service.mesh.link_wrappers import ForwardingLink


class HoldsBatches(ForwardingLink):
    """The real link, whose batches pass on their events and then never end: a long job."""

    async def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: str
    ) -> AsyncIterator[list[WorkerEvent]]:
        async for events in self._link.run_batch(address, batch_id, model, jobs, **options):
            yield [e for e in events if type(e).__name__ == "StepDone"]
        await asyncio.Event().wait()


async def test_a_graceful_stop_counts_no_lost_worker_and_the_job_queues_again(
    tmp_path: Path, models_dir: Path
) -> None:
    # One lost worker would fail the job: any the stop counted shows as FAILED.
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], scheduler={"max_attempts": 1})
    stopped = False
    try:
        batches = mesh.scheduler.runtime.batches
        batches.link = HoldsBatches(batches.link)
        request = common_pb2.GenerateRequest(model="echo", prompt="long", steps=2)
        job_id = (await mesh.gateway_stub().Submit(request, timeout=10)).job_id
        for _ in range(200):
            if mesh.core.jobs[job_id].state is JobState.RUNNING:
                break
            await asyncio.sleep(0.02)
        assert mesh.core.jobs[job_id].state is JobState.RUNNING
        await mesh.scheduler.stop(0.5)
        stopped = True
    finally:
        if not stopped:
            await mesh.scheduler.stop(0.5)
        for worker in mesh.workers:
            await worker.stop()
        await mesh.gateway.stop(0.5)

    store = JobStore(mesh.config.scheduler.store_path)
    try:
        found = await store.get(job_id)
        assert found is not None
        job = found[0]
        assert not job.state.terminal, (job.state, job.error_message)
        assert job.worker_losses == 0
    finally:
        await store.close()

    # The next start queues it again, first in line, as after a crash.
    scheduler = await start_scheduler(mesh.config, load_registry())
    try:
        restored = scheduler.runtime.core.jobs[job_id]
        assert (restored.state, restored.worker_losses) == (JobState.QUEUED, 0)
    finally:
        await scheduler.stop(0.5)
