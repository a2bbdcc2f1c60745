"""diffusers takes one `strength` per pipeline call, so img2img jobs whose strengths differ
must never share a batch, even when everything else about them (model, size, input image
size, steps) matches and the batch has room."""

from __future__ import annotations

import dataclasses

from mediamesh.common.generation import InputImage
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore

from .fakes import FakeClock, make_core, new_job, worker

IMG2IMG = "flux-img2img-tiny"
IMAGE = InputImage(sha256="0" * 64, width=64, height=64, mime_type="image/png")


def submit(core: SchedulerCore, strength: float, seed: int) -> Job:
    new = new_job(model=IMG2IMG, seed=seed)
    params = dataclasses.replace(new.params, image=IMAGE, strength=strength)
    outcome = core.submit(dataclasses.replace(new, params=params))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def ids(jobs: tuple[Job, ...] | list[Job]) -> list[str]:
    return sorted(j.job_id for j in jobs)


def test_jobs_that_differ_only_in_strength_have_different_compat_keys() -> None:
    core = make_core(FakeClock())
    low, high, again = submit(core, 0.5, 1), submit(core, 0.8, 2), submit(core, 0.5, 3)
    assert low.compat_key != high.compat_key
    # The seed is per job in a batch: it does not split one.
    assert low.compat_key == again.compat_key
    # However close: the batch's call takes one of them, and the other job would not get its
    # own (the key rounded to 4 places, so these two shared a call).
    assert submit(core, 0.12341, 4).compat_key != submit(core, 0.12344, 5).compat_key


def test_a_batch_with_room_leaves_a_job_of_another_strength_out() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0", models=(IMG2IMG,)))
    # Interleaved, so the job of the other strength is next in line when companions are picked.
    low = [submit(core, 0.5, 1)]
    high = submit(core, 0.8, 2)
    low.append(submit(core, 0.5, 3))
    clock.advance(1)  # past the batch window
    [first] = core.schedule()
    # The model's max_batch is 4: the batch had room for the 0.8 job and did not take it.
    assert ids(first.jobs) == ids(low)
    for job in first.jobs:
        core.job_succeeded(job.job_id, first.batch_id)
    core.batch_ended(first.batch_id)
    [second] = core.schedule()
    assert ids(second.jobs) == [high.job_id]


def test_strengths_in_flight_together_each_get_their_own_batch() -> None:
    clock = FakeClock()
    core = make_core(clock)
    for name in ("w0", "w1", "w2"):
        core.register_worker(worker(name, models=(IMG2IMG,)))
    strengths = (0.3, 0.6, 0.6001)
    submitted = {s: [submit(core, s, seed) for seed in (1, 2)] for s in strengths}
    clock.advance(1)
    dispatches = core.schedule()
    assert sorted(ids(d.jobs) for d in dispatches) == sorted(ids(j) for j in submitted.values())
    for dispatch in dispatches:
        assert len({j.params.strength for j in dispatch.jobs}) == 1
