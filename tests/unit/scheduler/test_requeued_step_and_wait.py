"""A job that goes back to its queue (lost worker, preemption, scheduler restart) shows the
step its next attempt starts from, and a restart keeps a queued job's wait and aging."""

from __future__ import annotations

import dataclasses

from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.queues import ModelQueue
from mediamesh.scheduler.core.scheduler import SchedulerCore
from mediamesh.scheduler.events import EventHub
from mediamesh.scheduler.watching import JobWatchers

from .fakes import FakeClock, make_core, new_job, worker


def running_job(core: SchedulerCore, clock: FakeClock, steps: int = 8) -> tuple[Job, str]:
    """A job that has run two steps on worker w0, and its batch id."""
    core.register_worker(worker("w0"))
    outcome = core.submit(new_job(steps=steps))
    job = outcome.job  # type: ignore[union-attr]
    clock.advance(1)
    [dispatch] = core.schedule()
    for step in (1, 2):
        core.job_progress(job.job_id, dispatch.batch_id, step, steps)
    return job, dispatch.batch_id


def stored_job(clock: FakeClock, state: JobState, **fields: object) -> Job:
    """A job as the store gives it back at a restart."""
    params = new_job(steps=40).params
    job = Job(
        job_id="stored-1",
        tenant="t1",
        model="flux-tiny",
        queue="image",
        priority=Priority.STANDARD,
        params=params,
        created_at=clock.now - 840.0,
        state=state,
        total_steps=40,
    )
    return dataclasses.replace(job, **fields)  # type: ignore[arg-type]


def test_a_job_whose_worker_is_lost_starts_over_at_step_0() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job, _ = running_job(core, clock)
    core.worker_lost("w0", "killed")
    assert (job.state, job.attempts, job.step) == (JobState.QUEUED, 1, 0)
    assert job.remaining_fraction == 1.0


def test_a_job_whose_worker_is_lost_after_a_checkpoint_shows_the_checkpoint_step() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job, batch_id = running_job(core, clock)
    core.job_checkpointed(job.job_id, batch_id, "/ckpt/job-step2.pt", 2)
    for step in (3, 4):
        core.job_progress(job.job_id, batch_id, step, 8)
    core.worker_lost("w0", "killed")
    assert (job.state, job.step, job.checkpoint) == (JobState.QUEUED, 2, "/ckpt/job-step2.pt")


def test_a_preempted_job_without_a_checkpoint_starts_over() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job, batch_id = running_job(core, clock)
    core.job_checkpointed(job.job_id, batch_id, "/ckpt/job-step1.pt", 1)
    # Its scheduler keeps no step counter: it stops at step 2 and writes nothing.
    core.job_preempted(job.job_id, batch_id, "", 2)
    assert (job.state, job.step, job.checkpoint) == (JobState.QUEUED, 0, None)


def test_a_running_job_restored_without_a_checkpoint_starts_over_at_step_0() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job = stored_job(clock, JobState.RUNNING, attempts=1, step=34, worker_id="w0")
    core.restore(job)
    assert (job.state, job.attempts, job.step) == (JobState.QUEUED, 1, 0)


def test_a_restored_job_shows_its_checkpoint_step_not_the_steps_run_after_it() -> None:
    clock = FakeClock()
    core = make_core(clock)
    named = stored_job(clock, JobState.RUNNING, step=34, checkpoint="/ckpt/stored-1-step30.pt")
    core.restore(named)
    assert named.step == 30
    core.register_worker(worker("w0"))
    assert len(core.schedule()) == 1
    assert (named.state, named.attempts, named.step) == (JobState.DISPATCHED, 1, 30)
    # A name the worker would not write says no step: the step as stored stays.
    other = make_core(clock)
    unnamed = stored_job(clock, JobState.QUEUED, step=12, checkpoint="/ckpt/elsewhere.pt")
    other.restore(unnamed)
    assert unnamed.step == 12


def test_a_dispatched_job_is_watched_from_its_dispatch_notice_not_a_stale_step() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job = stored_job(clock, JobState.RUNNING, attempts=1, step=1, worker_id="w0")
    core.restore(job)
    core.register_worker(worker("w1"))
    core.schedule()
    watchers = JobWatchers(core, EventHub(), {})
    first = watchers.snapshot_event(job)
    assert (first.state, first.kind, first.notice) == (JobState.DISPATCHED, "notice", "dispatched")
    assert first.attempt == 2
    # Resumed from a checkpoint, the attempt still has run no step of its own.
    job.step = 30
    assert watchers.snapshot_event(job).kind == "notice"
    core.job_progress(job.job_id, job.batch_id or "", 31, 40)
    now = watchers.snapshot_event(job)
    assert (now.state, now.kind, now.step, now.attempt) == (JobState.RUNNING, "progress", 31, 2)


def test_a_restart_keeps_a_queued_jobs_wait() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.restore(stored_job(clock, JobState.QUEUED))
    assert core.oldest_wait_s("image") == 840.0


def test_a_job_on_a_worker_at_the_restart_enters_the_queue_then() -> None:
    clock = FakeClock()
    core = make_core(clock)
    job = stored_job(clock, JobState.RUNNING, attempts=1, worker_id="w0")
    core.restore(job)
    assert job.at_front and job.enqueued_at == clock.now


def test_a_restored_job_created_after_now_has_no_negative_wait() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.restore(stored_job(clock, JobState.QUEUED, created_at=clock.now + 5.0))
    assert core.oldest_wait_s("image") == 0.0


def test_a_restart_keeps_a_queued_jobs_aging() -> None:
    clock = FakeClock()
    core = make_core(clock)  # aging_s_per_class 30 s: 840 s of waiting is 28 classes
    old_batch = stored_job(clock, JobState.QUEUED, priority=Priority.BATCH)
    core.restore(old_batch)
    fresh = core.submit(new_job(steps=5)).job  # type: ignore[union-attr]
    core.register_worker(worker("w0"))
    [dispatch] = core.schedule()
    assert dispatch.jobs[0] is old_batch and fresh.state is JobState.QUEUED


def test_a_job_older_than_its_class_reorders_the_classes() -> None:
    queue = ModelQueue("flux-tiny", aging_s_per_class=30.0)
    now = 1000.0

    def queued(job_id: str, priority: Priority, enqueued_at: float) -> Job:
        params = new_job().params
        job = Job(job_id, "t1", "flux-tiny", "image", priority, params, enqueued_at)
        job.enqueued_at = enqueued_at
        queue.add(job)
        return job

    queued("standard", Priority.STANDARD, now)
    queued("batch-new", Priority.BATCH, now)
    assert queue.class_order(now) == (Priority.STANDARD, Priority.BATCH)
    # Restored with the wait it had before a restart: its class has aged past STANDARD.
    queued("batch-old", Priority.BATCH, now - 840.0)
    assert queue.class_order(now) == (Priority.BATCH, Priority.STANDARD)


def test_jobs_back_at_the_front_go_by_class_first() -> None:
    # A paused BATCH job and the REALTIME job it was paused for, both on the worker when the
    # scheduler restarted: the store gives the BATCH one back first.
    clock = FakeClock()
    core = make_core(clock)
    paused = stored_job(clock, JobState.RUNNING, attempts=1, priority=Priority.BATCH)
    urgent = stored_job(
        clock, JobState.RUNNING, job_id="stored-2", attempts=1, priority=Priority.REALTIME
    )
    core.restore(paused)
    core.restore(urgent)
    # Past BATCH's wait for spot room: both may run on this on-demand worker.
    clock.advance(60)
    core.register_worker(worker("w0"))
    [first] = core.schedule()
    assert [job.job_id for job in first.jobs] == ["stored-2"]
