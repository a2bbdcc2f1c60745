"""An ended job is held in memory until retention without its inline input images: the core
drops their bytes when the job ends (or is restored ended), the store's row keeps them, and
the store's params JSON cache keeps nothing of an ended job."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.common.input_refs import inline_bytes, inline_ref, without_inline_bytes
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore
from mediamesh.scheduler.store import job_store
from mediamesh.scheduler.store.job_store import JobStore, job_row

from .fakes import FakeClock, make_core, new_job, worker

INPAINT = "sdxl-inpaint-tiny"
PIXELS = b"\x89PNG not really, but bytes all the same" * 100
# The mask lives in the artifact store: its path is what retention's sweep needs to find.
MASK_FILE = "/artifacts/inputs/abc.mask_image.png"
PARAMS = job_store._COLUMNS.index("params")


def image_params() -> GenerationParams:
    params = new_job(model=INPAINT).params
    return dataclasses.replace(
        params,
        image=InputImage("a" * 64, 64, 64, "image/png", inline_ref(PIXELS)),
        mask_image=InputImage("b" * 64, 64, 64, "image/png", MASK_FILE),
        strength=0.7,
    )


def submit(core: SchedulerCore, params: GenerationParams, deadline: float | None = None) -> Job:
    new = dataclasses.replace(new_job(model=INPAINT, deadline=deadline), params=params)
    outcome = core.submit(new)
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def started(clock: FakeClock, deadline: float | None = None) -> tuple[SchedulerCore, Job, str]:
    """A core with one inpainting job dispatched to its worker, and the batch's id."""
    core = make_core(clock)
    core.register_worker(worker("w0", models=(INPAINT,)))
    job = submit(core, image_params(), deadline)
    clock.advance(1)  # past the batch window
    [dispatch] = core.schedule()
    assert dispatch.jobs == (job,)
    return core, job, dispatch.batch_id


def succeed(core: SchedulerCore, job: Job, batch_id: str, clock: FakeClock) -> None:
    core.job_succeeded(job.job_id, batch_id)


def fail(core: SchedulerCore, job: Job, batch_id: str, clock: FakeClock) -> None:
    core.job_failed(job.job_id, batch_id, StatusCode.INTERNAL, "boom")


def cancel(core: SchedulerCore, job: Job, batch_id: str, clock: FakeClock) -> None:
    core.cancel(job.job_id)


def expire(core: SchedulerCore, job: Job, batch_id: str, clock: FakeClock) -> None:
    clock.advance(3600)
    assert core.expire_due() == [job]


def lose_workers(core: SchedulerCore, job: Job, batch_id: str, clock: FakeClock) -> None:
    for n in range(core.policy.max_worker_losses):
        if n:
            core.register_worker(worker("w0", models=(INPAINT,)))
            clock.advance(1)
            assert len(core.schedule()) == 1
            assert job.params.image is not None and job.params.image.ref.startswith("inline:")
        core.worker_lost("w0", "gone")


Ending = Callable[[SchedulerCore, Job, str, FakeClock], None]


@pytest.mark.parametrize(
    ("end", "state"),
    [
        (succeed, JobState.SUCCEEDED),
        (fail, JobState.FAILED),
        (cancel, JobState.CANCELLED),
        (expire, JobState.EXPIRED),
        (lose_workers, JobState.FAILED),
    ],
)
def test_an_ended_job_holds_no_inline_input_bytes(end: Ending, state: JobState) -> None:
    clock = FakeClock()
    core, job, batch_id = started(clock, deadline=clock.now + 600)
    sent = job.params
    end(core, job, batch_id, clock)
    assert job.state is state and core.jobs[job.job_id] is job
    image, mask = job.params.image, job.params.mask_image
    assert image is not None and mask is not None
    # What identifies the inputs stays, and so does the file that retention deletes.
    assert sent.image is not None and image == dataclasses.replace(sent.image, ref="")
    assert mask == sent.mask_image and mask.ref == MASK_FILE
    assert dataclasses.replace(job.params, image=sent.image) == sent
    assert job.compat_key == dataclasses.replace(job, params=sent).compat_key


def test_a_job_that_goes_back_in_line_keeps_its_inline_inputs() -> None:
    clock = FakeClock()
    core, job, batch_id = started(clock)
    sent = job.params
    core.job_preempted(job.job_id, batch_id, "ckpt", 2)
    core.batch_ended(batch_id)
    assert job.state is JobState.QUEUED and job.params is sent
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.jobs[0].params.image == sent.image  # the worker gets the bytes again


def test_a_job_without_inline_inputs_keeps_its_very_params() -> None:
    params = dataclasses.replace(image_params(), image=None)
    assert without_inline_bytes(params) is params
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0", models=(INPAINT,)))
    job = submit(core, params)
    clock.advance(1)
    [dispatch] = core.schedule()
    core.job_succeeded(job.job_id, dispatch.batch_id)
    assert job.state is JobState.SUCCEEDED and job.params is params


def test_a_job_restored_ended_holds_no_inline_bytes_and_a_queued_one_keeps_them() -> None:
    clock = FakeClock()
    core = make_core(clock)
    params = image_params()
    ended = Job("j-ended", "t1", INPAINT, "image", Priority.STANDARD, params, clock.now)
    ended.state, ended.finished_at = JobState.SUCCEEDED, clock.now
    queued = Job("j-queued", "t1", INPAINT, "image", Priority.STANDARD, params, clock.now)
    core.restore(ended)
    core.restore(queued)
    assert ended.params.image is not None and ended.params.image.ref == ""
    assert queued.params is params


def test_the_row_of_an_ended_job_keeps_its_inputs_and_round_trips(tmp_path: Path) -> None:
    clock = FakeClock()
    core, job, batch_id = started(clock)
    sent = job.params

    async def scenario() -> tuple[Job, dict[str, Any] | None] | None:
        store = JobStore(tmp_path / "jobs.sqlite3")
        try:
            await store.insert(job)
            core.job_succeeded(job.job_id, batch_id)
            assert job.params.image is not None and job.params.image.ref == ""
            await store.save_many([job_row(job, {"path": "/r.png"})])
            return await store.get(job.job_id)
        finally:
            await store.close()

    stored = asyncio.run(scenario())
    assert stored is not None
    row_job, result = stored
    assert row_job.state is JobState.SUCCEEDED and result == {"path": "/r.png"}
    assert row_job.params == sent
    assert row_job.params.image is not None and inline_bytes(row_job.params.image.ref) == PIXELS
    # A restarted scheduler takes it back as it held it before: without the bytes.
    restored = make_core(clock)
    restored.restore(row_job)
    assert restored.jobs[job.job_id].params == job.params


def test_the_params_cache_keeps_nothing_of_an_ended_job() -> None:
    clock = FakeClock()
    core, job, batch_id = started(clock)
    sent = weakref.ref(job.params)
    # Written at acceptance and at each transition, converted once.
    assert job_row(job)[PARAMS] is job_row(job)[PARAMS]
    core.job_succeeded(job.job_id, batch_id)
    final = job_row(job)[PARAMS]
    gc.collect()
    assert sent() is None, "something still holds the params with the inline image"
    assert job.params not in job_store._params_json
    assert GenerationParams.from_record(json.loads(final)) == job.params


def test_the_params_cache_lets_go_of_an_ended_text_job() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    outcome = core.submit(new_job(seed=8191))
    assert isinstance(outcome, Accepted)
    job = outcome.job
    queued = job_row(job)[PARAMS]
    assert job.params in job_store._params_json
    clock.advance(1)
    [dispatch] = core.schedule()
    assert job_row(job)[PARAMS] is queued
    core.job_succeeded(job.job_id, dispatch.batch_id)
    assert job_row(job)[PARAMS] is queued  # the final write still uses the one conversion
    assert job.params not in job_store._params_json
