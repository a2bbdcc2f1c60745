"""A batch given to a worker ahead of time waits for the device, then runs unchanged."""

from __future__ import annotations

import asyncio

from wm_helpers import job_for, of, run

from mediamesh.common.work import JobFinished, StepDone, WorkerEvent
from mediamesh.worker.runtime import WorkerRuntime


async def test_a_batch_sent_while_another_runs_waits_for_its_denoising_to_end(host_for) -> None:
    flux = host_for("flux-tiny")
    runtime = WorkerRuntime("w0", "on-demand", {"flux-tiny": flux})
    timeline: list[tuple[str, WorkerEvent]] = []

    async def drain(batch_id: str, seed: int) -> None:
        jobs = [job_for(flux.spec, f"{batch_id}-job", seed=seed, steps=8)]
        async for event in runtime.run_batch(batch_id, "flux-tiny", jobs):
            timeline.append((batch_id, event))

    first = asyncio.create_task(drain("first", 1))
    await asyncio.sleep(0)  # `first` is in line for the device before `next` arrives
    await asyncio.wait_for(asyncio.gather(first, drain("next", 2)), 120)

    steps = [(b, e.step) for b, e in timeline if isinstance(e, StepDone)]
    # One batch on the device at a time: every step of `first`, then every step of `next`.
    assert steps == [("first", s) for s in range(1, 9)] + [("next", s) for s in range(1, 9)]
    for batch_id, seed in (("first", 1), ("next", 2)):
        (result,) = of([e for _, e in timeline], f"{batch_id}-job", JobFinished)
        alone = run(flux, [job_for(flux.spec, f"{batch_id}-job", seed=seed, steps=8)])
        assert result.data == of(alone, f"{batch_id}-job", JobFinished)[0].data
