"""Pausing a running batch at a step boundary for an urgent batch on the same worker.

flux-tiny for both: the hardest case, since the urgent batch runs in the very pipeline the
paused loop is blocked in (its sampler and per-call attributes must come back unchanged).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wm_helpers import job_for, of, run

from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobCheckpointed, JobFinished, JobNotice, StepDone, WorkerEvent
from mediamesh.worker.runtime import WorkerRuntime

BULK_STEPS = 24


@pytest.fixture
def flux(host_for):
    return host_for("flux-tiny")


def bulk_jobs(spec):
    return [job_for(spec, f"bulk{i}", seed=40 + i, steps=BULK_STEPS) for i in range(2)]


async def bulk_under_way(
    runtime: WorkerRuntime, spec: ModelSpec, timeline: list[tuple[str, WorkerEvent]] | None = None
) -> AsyncIterator[WorkerEvent]:
    """The bulk batch's event stream, read (into `timeline`) until it is a few steps in."""
    bulk = runtime.run_batch("bulk", "flux-tiny", bulk_jobs(spec))
    async for event in bulk:
        if timeline is not None:
            timeline.append(("bulk", event))
        if isinstance(event, StepDone) and event.step >= 3:
            break
    return bulk


async def drain(
    stream: AsyncIterator[WorkerEvent], batch: str, timeline: list[tuple[str, WorkerEvent]]
) -> None:
    async for event in stream:
        timeline.append((batch, event))


async def test_urgent_batch_runs_at_the_next_step_and_the_paused_batch_is_unchanged(
    flux,
) -> None:
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    timeline: list[tuple[str, WorkerEvent]] = []
    # The bulk batch is a few steps in when the urgent batch arrives.
    bulk = await bulk_under_way(runtime, flux.spec, timeline)
    seen_step = max(e.step for b, e in timeline if isinstance(e, StepDone))
    urgent_job = job_for(flux.spec, "urgent", seed=7)
    urgent = runtime.run_batch("urgent", "flux-tiny", [urgent_job], pause_batch_id="bulk")
    await asyncio.wait_for(
        asyncio.gather(drain(bulk, "bulk", timeline), drain(urgent, "urgent", timeline)), 120
    )

    bulk_events = [e for b, e in timeline if b == "bulk"]
    # Its denoising steps; it encodes its result off the device, while the bulk goes on.
    urgent_at = [
        i for i, (b, e) in enumerate(timeline) if b == "urgent" and isinstance(e, StepDone)
    ]
    for job in ("bulk0", "bulk1"):
        notices = [e for e in of(bulk_events, job, JobNotice)]
        assert [n.kind for n in notices] == ["paused", "resumed"]
        paused_at = timeline.index(("bulk", notices[0]))
        resumed_at = timeline.index(("bulk", notices[1]))
        # The urgent batch denoised entirely while the bulk batch was paused ...
        assert paused_at < urgent_at[0] and urgent_at[-1] < resumed_at
        steps = [e.step for e in of(bulk_events, job, StepDone)]
        assert steps == list(range(1, BULK_STEPS + 1))
        # ... and the pause came at a step boundary soon after it arrived, far from the end.
        paused_step = max(e.step for e in of([e for _, e in timeline[:paused_at]], job, StepDone))
        assert paused_step <= seen_step + 3 < BULK_STEPS
        # Its checkpoint, for resuming elsewhere, was written as it paused.
        assert any(c.step == paused_step for c in of(bulk_events, job, JobCheckpointed))

    # Byte-identical to runs without any pause: the paused batch and the urgent one.
    alone = run(flux, bulk_jobs(flux.spec))
    for job in ("bulk0", "bulk1"):
        (paused_result,) = of(bulk_events, job, JobFinished)
        (alone_result,) = of(alone, job, JobFinished)
        assert paused_result.data == alone_result.data
    (urgent_result,) = of([e for _, e in timeline], "urgent", JobFinished)
    (urgent_alone,) = of(run(flux, [job_for(flux.spec, "urgent", seed=7)]), "urgent", JobFinished)
    assert urgent_result.data == urgent_alone.data


async def test_paused_batch_resumes_elsewhere_from_its_pause_checkpoint(flux, tmp_path) -> None:
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    bulk = await bulk_under_way(runtime, flux.spec)
    urgent = runtime.run_batch(
        "urgent", "flux-tiny", [job_for(flux.spec, "urgent", seed=7)], pause_batch_id="bulk"
    )
    urgent_events: list[tuple[str, WorkerEvent]] = []
    urgent_task = asyncio.create_task(drain(urgent, "urgent", urgent_events))
    # What a scheduler holds once the worker dies while the batch is paused: the checkpoint
    # each job reported as it paused (the worker deletes it once the job ends, so keep a copy).
    kept: dict[str, Path] = {}
    async for event in bulk:
        if isinstance(event, JobCheckpointed):
            kept[event.job_id] = tmp_path / Path(event.checkpoint).name
            shutil.copy(event.checkpoint, kept[event.job_id])
    await asyncio.wait_for(urgent_task, 120)
    assert sorted(kept) == ["bulk0", "bulk1"]
    resumed_jobs = [
        job_for(flux.spec, job.job_id, seed=40 + i, steps=BULK_STEPS, resume_checkpoint=str(path))
        for i, (job, path) in enumerate(zip(bulk_jobs(flux.spec), kept.values(), strict=True))
    ]
    elsewhere = run(flux, resumed_jobs)
    alone = run(flux, bulk_jobs(flux.spec))
    for job in ("bulk0", "bulk1"):
        assert [n.kind for n in of(elsewhere, job, JobNotice)] == ["resumed"]
        assert of(elsewhere, job, JobFinished)[0].data == of(alone, job, JobFinished)[0].data


async def test_urgent_batch_does_not_wait_for_the_pause_checkpoint(flux, monkeypatch) -> None:
    """The paused jobs' files are written while the urgent batch runs, not before it starts:
    with a disk this slow, the urgent batch has denoised before any file is reported."""
    from mediamesh.worker.models import progress

    write = progress.write_checkpoint

    def slow_write(path, checkpoint):
        time.sleep(1.5)
        write(path, checkpoint)

    monkeypatch.setattr(progress, "write_checkpoint", slow_write)
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    timeline: list[tuple[str, WorkerEvent]] = []
    bulk = await bulk_under_way(runtime, flux.spec, timeline)
    urgent_job = job_for(flux.spec, "urgent", seed=7)
    urgent = runtime.run_batch("urgent", "flux-tiny", [urgent_job], pause_batch_id="bulk")
    await asyncio.wait_for(
        asyncio.gather(drain(bulk, "bulk", timeline), drain(urgent, "urgent", timeline)), 120
    )
    last_urgent_step = max(
        i for i, (b, e) in enumerate(timeline) if b == "urgent" and isinstance(e, StepDone)
    )
    checkpointed = [i for i, (b, e) in enumerate(timeline) if isinstance(e, JobCheckpointed)]
    assert len(checkpointed) == 2 and min(checkpointed) > last_urgent_step
    # Still written before the paused batch went on: its files hold the pause's state.
    resumed = [
        i for i, (b, e) in enumerate(timeline) if isinstance(e, JobNotice) and e.kind == "resumed"
    ]
    assert max(checkpointed) < min(resumed)
    alone = run(flux, bulk_jobs(flux.spec))
    for job in ("bulk0", "bulk1"):
        paused = of([e for b, e in timeline if b == "bulk"], job, JobFinished)[0]
        assert paused.data == of(alone, job, JobFinished)[0].data


async def test_urgent_batch_overtakes_a_batch_given_ahead_that_has_not_started(flux) -> None:
    """What the scheduler asks when the running batch is finishing: the urgent batch names
    the batch waiting behind it, runs before it, and that batch then runs as it would have."""
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    timeline: list[tuple[str, WorkerEvent]] = []
    bulk = await bulk_under_way(runtime, flux.spec, timeline)
    ahead_jobs = [job_for(flux.spec, f"ahead{i}", seed=60 + i) for i in range(2)]
    ahead = runtime.run_batch("ahead", "flux-tiny", ahead_jobs)
    ahead_task = asyncio.create_task(drain(ahead, "ahead", timeline))
    bulk_task = asyncio.create_task(drain(bulk, "bulk", timeline))
    await asyncio.sleep(0.05)  # the batch given ahead is in line on the worker
    urgent_job = job_for(flux.spec, "urgent", seed=7)
    urgent = runtime.run_batch("urgent", "flux-tiny", [urgent_job], pause_batch_id="ahead")
    await asyncio.wait_for(
        asyncio.gather(drain(urgent, "urgent", timeline), ahead_task, bulk_task), 120
    )
    steps = [(b, e) for b, e in timeline if isinstance(e, StepDone)]
    last_urgent = max(i for i, (b, _) in enumerate(steps) if b == "urgent")
    first_ahead = min(i for i, (b, _) in enumerate(steps) if b == "ahead")
    assert last_urgent < first_ahead
    ahead_events = [e for b, e in timeline if b == "ahead"]
    assert not [e for e in ahead_events if isinstance(e, JobNotice)]  # never paused
    alone = run(flux, [job_for(flux.spec, f"ahead{i}", seed=60 + i) for i in range(2)])
    for job in ("ahead0", "ahead1"):
        assert of(ahead_events, job, JobFinished)[0].data == of(alone, job, JobFinished)[0].data
