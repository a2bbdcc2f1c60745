"""A draining worker leaves only once the scheduler has applied its batches' last events.

Before, the worker slept 0.2 s after its batches ended and closed its session, betting that
the PREEMPTED events had been applied by then. With a scheduler slower than that, the
session closed first: the job was given up as lost (counting against its retries) and its
checkpoint was never read, so it started over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.registry import BatchingSpec, Registry, load_registry
from mediamesh.common.work import JobParams, StepDone, WorkerEvent
from mediamesh.scheduler.batches import WorkerLink
from mediamesh.scheduler.core.jobs import JobState
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.link_wrappers import ForwardingLink

# Longer than the old fixed wait, so only an acknowledgement gets the events through.
EVENT_DELAY_S = 0.4


class SlowScheduler(ForwardingLink):
    """The real link, with the scheduler taking EVENT_DELAY_S over each event it reads."""

    def __init__(self, link: WorkerLink) -> None:
        super().__init__(link)
        self.first_step = asyncio.Event()

    async def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: str
    ) -> AsyncIterator[list[WorkerEvent]]:
        async for events in self._link.run_batch(address, batch_id, model, jobs):
            for event in events:
                if isinstance(event, StepDone):
                    self.first_step.set()
                await asyncio.sleep(EVENT_DELAY_S)
                yield [event]


def pair_registry() -> Registry:
    """flux-tiny batching exactly two jobs, however long the second takes to arrive: on a
    loaded machine its default 10 ms window could send the two in batches of their own."""
    registry = load_registry()
    batching = BatchingSpec(mode="dynamic", max_batch=2, max_wait_ms=60_000)
    return Registry(
        models=[
            m.model_copy(update={"batching": batching}) if m.name == "flux-tiny" else m
            for m in registry.models
        ]
    )


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_drain_waits_for_the_scheduler_to_apply_every_preempted_event(
    tmp_path, models_dir
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], registry=pair_registry())
    try:
        runtime = mesh.scheduler.runtime
        slow = runtime.batches.link = SlowScheduler(runtime.batches.link)
        (worker,) = mesh.workers
        stub = mesh.gateway_stub()
        # Large and long enough to be still running when the drain comes.
        requests = [
            common_pb2.GenerateRequest(
                model="flux-tiny", prompt="x", steps=50, width=512, height=512, seed=seed
            )
            for seed in range(2)
        ]
        handles = await asyncio.gather(*(stub.Submit(r, timeout=10) for r in requests))
        job_ids = [handle.job_id for handle in handles]
        # Both run in one batch; drain once it is past its first step, so that preempting
        # it writes checkpoints.
        await until(lambda: sorted(worker.runtime.running_jobs) == sorted(job_ids))
        await asyncio.wait_for(slow.first_step.wait(), 30)
        assert not worker.runtime.ended_batches

        await worker.drain_and_stop(10)
        mesh.workers.remove(worker)

        # The session is closed: every job is back in line with its checkpoint, and
        # none was counted as lost with the worker.
        for job_id in job_ids:
            job = mesh.core.jobs[job_id]
            assert job.state is JobState.QUEUED, job.state
            assert job.checkpoint, f"{job_id}: its PREEMPTED event was never applied"
            assert job.step >= 1
            assert job.worker_losses == 0
    finally:
        await stop_mesh(mesh)
