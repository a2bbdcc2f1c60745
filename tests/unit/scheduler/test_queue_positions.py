"""A queued job's position counts the jobs ahead of it: the front, higher classes, and its
own class's earlier arrivals, never the jobs that came after it."""

from __future__ import annotations

from mediamesh.scheduler.core.jobs import Job, Priority
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore

from .fakes import FakeClock, make_core, new_job, worker


def submitted(core: SchedulerCore, priority: Priority, seed: int) -> Job:
    outcome = core.submit(new_job(priority=priority, steps=50, seed=seed))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def test_each_waiting_job_sees_only_the_jobs_ahead_of_it() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    running = submitted(core, Priority.STANDARD, 0)
    clock.advance(1)
    [batch] = core.schedule()
    assert [j.job_id for j in batch.jobs] == [running.job_id]
    waiting = [submitted(core, Priority.STANDARD, seed) for seed in (1, 2, 3)]
    assert [core.queue_position(job) for job in waiting] == [0, 1, 2]
    # A more urgent job goes ahead of them all; a later one of their class behind them.
    urgent = submitted(core, Priority.REALTIME, 4)
    later = submitted(core, Priority.STANDARD, 5)
    assert core.queue_position(urgent) == 0
    assert [core.queue_position(job) for job in waiting] == [1, 2, 3]
    assert core.queue_position(later) == 4
    # One that leaves (cancelled) no longer counts for those behind it.
    core.cancel(waiting[0].job_id)
    assert [core.queue_position(job) for job in waiting[1:]] == [1, 2]
