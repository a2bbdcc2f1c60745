"""A pause leaves the paused call's own state out of the urgent call on the same pipeline.

The paused loop is blocked inside its pipeline call, so whatever that call set on the
pipeline object (per-call attributes, the step count of an img2img tail, a resumed group's
latents hook) is still there while the urgent batch calls the same pipeline.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

from wm_helpers import job_for, of, run

from mediamesh.common.generation import InputImage
from mediamesh.common.input_refs import inline_ref
from mediamesh.common.work import JobFinished, JobNotice, JobPreempted, StepDone, WorkerEvent
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.runtime import WorkerRuntime
from tests.input_media import image_bytes


def _input(data: bytes) -> InputImage:
    return InputImage(hashlib.sha256(data).hexdigest(), 64, 64, "image/png", inline_ref(data))


async def _paused_for(
    runtime: WorkerRuntime, model: str, bulk: list, urgent: list
) -> list[tuple[str, WorkerEvent]]:
    """Runs `bulk`, and `urgent` as an urgent batch once the bulk batch is 2 steps in."""
    timeline: list[tuple[str, WorkerEvent]] = []
    stream = runtime.run_batch("bulk", model, bulk)
    async for event in stream:
        timeline.append(("bulk", event))
        if isinstance(event, StepDone) and event.step >= 2 + _start(bulk):
            break
    urgent_stream = runtime.run_batch("urgent", model, urgent, pause_batch_id="bulk")

    async def drain(events: AsyncIterator[WorkerEvent], name: str) -> None:
        async for event in events:
            timeline.append((name, event))

    await asyncio.wait_for(
        asyncio.gather(drain(stream, "bulk"), drain(urgent_stream, "urgent")), 120
    )
    return timeline


def _start(jobs: list) -> int:
    return 2 if jobs[0].resume_checkpoint else 0


def _events(timeline: list[tuple[str, WorkerEvent]], batch: str) -> list[WorkerEvent]:
    return [event for name, event in timeline if name == batch]


async def test_an_img2img_tail_count_stays_with_its_own_call(host_for) -> None:
    model = "flux-img2img-tiny"
    host = host_for(model)
    image = _input(image_bytes(color=(40, 90, 200)))
    # 12 steps of 24 for the bulk, 4 of 4 for the urgent job.
    bulk = [job_for(host.spec, "bulk", 3, steps=24, strength=0.5, image=image)]
    urgent = [job_for(host.spec, "urgent", 5, steps=4, strength=1.0, image=image)]
    timeline = await _paused_for(
        WorkerRuntime("w0", "on-demand", {model: host}), model, bulk, urgent
    )

    bulk_events, urgent_events = _events(timeline, "bulk"), _events(timeline, "urgent")
    assert [n.kind for n in of(bulk_events, "bulk", JobNotice)] == ["paused", "resumed"]
    assert [(e.step, e.total_steps) for e in of(bulk_events, "bulk", StepDone)] == [
        (step, 12) for step in range(1, 13)
    ]
    assert [(e.step, e.total_steps) for e in of(urgent_events, "urgent", StepDone)] == [
        (step, 4) for step in range(1, 5)
    ]
    assert (
        of(bulk_events, "bulk", JobFinished)[0].data
        == of(run(host, bulk), "bulk", JobFinished)[0].data
    )
    assert (
        of(urgent_events, "urgent", JobFinished)[0].data
        == of(run(host, urgent), "urgent", JobFinished)[0].data
    )


async def test_a_resumed_groups_latents_stay_with_its_own_call(host_for, tmp_path: Path) -> None:
    model = "flux-tiny"
    host = host_for(model)
    fresh = [job_for(host.spec, f"bulk{i}", 40 + i, steps=12) for i in range(2)]

    def preempt_at_two(event: WorkerEvent, control: BatchControl) -> None:
        if isinstance(event, StepDone) and event.step == 2:
            control.preempt()

    # Preempted at step 2: the group resumes from there, with the resumed latents hook.
    events = run(host, fresh, on_event=preempt_at_two)
    saved = {e.job_id: e.checkpoint for e in events if isinstance(e, JobPreempted)}
    assert sorted(saved) == ["bulk0", "bulk1"]
    resumed = [
        job_for(host.spec, f"bulk{i}", 40 + i, steps=12, resume_checkpoint=saved[f"bulk{i}"])
        for i in range(2)
    ]
    urgent = [job_for(host.spec, "urgent", 7)]
    timeline = await _paused_for(
        WorkerRuntime("w0", "on-demand", {model: host}), model, resumed, urgent
    )

    bulk_events, urgent_events = _events(timeline, "bulk"), _events(timeline, "urgent")
    assert [n.kind for n in of(bulk_events, "bulk0", JobNotice)] == ["resumed", "paused", "resumed"]
    assert of(urgent_events, "urgent", JobFinished), urgent_events
    assert (
        of(urgent_events, "urgent", JobFinished)[0].data
        == of(run(host, urgent), "urgent", JobFinished)[0].data
    )
    alone = run(host, [job_for(host.spec, f"bulk{i}", 40 + i, steps=12) for i in range(2)])
    for job in ("bulk0", "bulk1"):
        assert of(bulk_events, job, JobFinished)[0].data == of(alone, job, JobFinished)[0].data
