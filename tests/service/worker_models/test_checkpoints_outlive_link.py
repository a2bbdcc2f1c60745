"""A batch stopped because its stream to the scheduler broke keeps its jobs' checkpoints.

Before, the worker cancelled such a batch as if its jobs had been cancelled by request, and
that deleted their periodic checkpoints: after a scheduler restart the requeued job found
none and started over at step 0. Only a job cancelled for good (`BatchControl.cancel` with
`discard_checkpoints`) has its checkpoints deleted here; the scheduler deletes those of any
job that ends.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from wm_helpers import job_for, of, run

from mediamesh.common.work import (
    JobCheckpointed,
    JobFinished,
    JobParams,
    StepDone,
    WorkerEvent,
)
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.progress import StepTracker
from mediamesh.worker.runtime import WorkerRuntime

STEPS = 8
EVERY = 2


@pytest.fixture
def flux(host_for):
    return host_for("flux-tiny")


async def test_a_broken_stream_keeps_the_checkpoints_and_the_job_resumes_from_the_last(
    flux, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_for(flux.spec, "linked", seed=61, steps=STEPS, checkpoint_every_steps=EVERY)
    (reference,) = of(run(flux, [job]), "linked", JobFinished)

    # The device thread waits at step 6 for the stream to break, or it could finish first.
    reach_boundary = StepTracker.on_step

    def held_at_step_6(tracker: StepTracker, loop_index: int, latents: Any) -> None:
        if tracker.start_step + loop_index + 1 == 6:
            deadline = time.monotonic() + 30
            while not tracker.control.is_cancelled("linked") and time.monotonic() < deadline:
                time.sleep(0.01)
        reach_boundary(tracker, loop_index, latents)

    monkeypatch.setattr(StepTracker, "on_step", held_at_step_6)
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    saved: list[JobCheckpointed] = []

    async def read_the_stream() -> None:
        # The generator the servicer streams from (RunBatch and BatchLink alike).
        async for group in runtime.run_batch_groups("b1", "flux-tiny", [job]):
            saved.extend(event for event in group if isinstance(event, JobCheckpointed))
            if any(isinstance(event, StepDone) and event.step == 5 for event in group):
                # What grpc does to the call's task when the scheduler goes away.
                reader = asyncio.current_task()
                assert reader is not None
                reader.cancel()

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(read_the_stream(), 60)
    monkeypatch.undo()

    assert [e.step for e in saved] == [2, 4]
    latest = Path(saved[-1].checkpoint)
    assert latest.is_file() and Path(saved[0].checkpoint).is_file()
    resumed = job_for(
        flux.spec,
        "linked",
        seed=61,
        steps=STEPS,
        checkpoint_every_steps=EVERY,
        resume_checkpoint=str(latest),
    )
    events = run(flux, [resumed])
    assert [e.step for e in of(events, "linked", StepDone)] == [5, 6, 7, 8]
    (finished,) = of(events, "linked", JobFinished)
    assert finished.data == reference.data


async def test_a_broken_stream_keeps_a_paused_batchs_checkpoints(
    flux, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler restarts while a batch is paused for urgent work: the checkpoints the
    pause wrote are what the requeued jobs resume from."""
    bulk = [job_for(flux.spec, f"bulk{i}", seed=70 + i, steps=24) for i in range(2)]
    references = of_each(run(flux, bulk), JobFinished)
    reach_boundary = StepTracker.on_step

    def held_once_paused(tracker: StepTracker, loop_index: int, latents: Any) -> None:
        # Back from the pause, the batch waits for its stream to break.
        deadline = time.monotonic() + 30
        while (
            tracker.jobs[0].job_id == "bulk0"
            and tracker.periodic
            and not tracker.control.is_cancelled("bulk0")
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        reach_boundary(tracker, loop_index, latents)

    monkeypatch.setattr(StepTracker, "on_step", held_once_paused)
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    saved: dict[str, JobCheckpointed] = {}
    under_way = asyncio.Event()

    async def read(batch_id: str, jobs: list[JobParams], pause_batch_id: str = "") -> None:
        async for group in runtime.run_batch_groups(batch_id, "flux-tiny", jobs, pause_batch_id):
            saved.update((e.job_id, e) for e in group if isinstance(e, JobCheckpointed))
            if any(isinstance(e, StepDone) and e.step >= 3 for e in group):
                under_way.set()

    bulk_read = asyncio.create_task(read("bulk", bulk))
    await asyncio.wait_for(under_way.wait(), 60)
    urgent = [job_for(flux.spec, "urgent", seed=7)]
    urgent_read = asyncio.create_task(read("urgent", urgent, pause_batch_id="bulk"))
    deadline = time.monotonic() + 60
    while len(saved) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    # The scheduler goes away: both calls are cancelled.
    for task in (bulk_read, urgent_read):
        task.cancel()
    await asyncio.gather(bulk_read, urgent_read, return_exceptions=True)
    monkeypatch.undo()

    assert sorted(saved) == ["bulk0", "bulk1"]
    assert all(Path(e.checkpoint).is_file() for e in saved.values())
    resumed = [
        job_for(
            flux.spec,
            job.job_id,
            seed=job.generation.seed,
            steps=24,
            resume_checkpoint=saved[job.job_id].checkpoint,
        )
        for job in bulk
    ]
    assert of_each(run(flux, resumed), JobFinished) == references


def of_each(events: list[WorkerEvent], kind: type) -> dict[str, bytes]:
    return {e.job_id: e.data for e in events if isinstance(e, kind)}


def test_a_cancel_for_good_deletes_the_checkpoints(flux) -> None:
    job = job_for(flux.spec, "ended", seed=62, steps=STEPS, checkpoint_every_steps=EVERY)

    def cancel_after_step_5(event: WorkerEvent, control: BatchControl) -> None:
        if isinstance(event, StepDone) and event.step == 5:
            control.cancel(["ended"], discard_checkpoints=True)

    events = run(flux, [job], cancel_after_step_5)
    saved = of(events, "ended", JobCheckpointed)
    assert [e.step for e in saved] == [2, 4]
    assert not any(Path(e.checkpoint).exists() for e in saved)
    assert of(events, "ended", JobFinished) == []
