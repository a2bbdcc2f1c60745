"""A worker gets its next batch while its current one decodes, and an idle device need not
wait out a batch window."""

from __future__ import annotations

from dataclasses import replace

from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.core.policy import DispatchPolicy
from mediamesh.scheduler.core.scheduler import Accepted

from .fakes import FakeClock, make_core, new_job, worker


def submit(core, **kwargs):
    outcome = core.submit(new_job(**kwargs))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def report_steps(core, dispatch, step: int) -> None:
    for job in dispatch.jobs:
        core.job_progress(job.job_id, dispatch.batch_id, step, 4)


def test_next_batch_goes_once_every_job_of_the_running_one_is_at_its_last_step():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for seed in range(4):
        submit(core, seed=seed)
    [first] = core.schedule()
    waiting = [submit(core, seed=10 + seed) for seed in range(3)]
    clock.advance(1)
    report_steps(core, first, 3)
    assert core.schedule() == []
    core.job_progress(first.jobs[0].job_id, first.batch_id, 4, 4)
    assert core.schedule() == []  # one job of the batch is still denoising
    report_steps(core, first, 4)
    [ahead] = core.schedule()
    assert ahead.worker_id == "w0"
    assert sorted(j.job_id for j in ahead.jobs) == sorted(j.job_id for j in waiting)
    # One batch ahead at most: the worker holds the finishing one and the next.
    submit(core, seed=20)
    clock.advance(1)
    assert core.schedule() == []
    for job in first.jobs:
        core.job_succeeded(job.job_id, first.batch_id)
    core.batch_ended(first.batch_id)
    assert core.schedule() == []  # the batch given ahead is running now
    assert core.units["w0"].batches == {ahead.batch_id}


def test_without_dispatching_ahead_the_next_batch_waits_for_the_end():
    clock = FakeClock()
    core = make_core(clock, dispatching=DispatchPolicy(ahead=False, window_when_idle=True))
    core.register_worker(worker("w0"))
    for seed in range(4):
        submit(core, seed=seed)
    [first] = core.schedule()
    submit(core, seed=9)
    clock.advance(1)
    report_steps(core, first, 4)
    assert core.schedule() == []


def test_an_idle_device_starts_at_once_without_window_when_idle():
    clock = FakeClock()
    core = make_core(clock, dispatching=DispatchPolicy(ahead=True, window_when_idle=False))
    core.register_worker(worker("w0"))
    job = submit(core)
    [dispatch] = core.schedule()  # no 30 ms window: the device is idle
    assert dispatch.jobs == (job,)
    # A batch given ahead still waits for its window, to fill up while the device works.
    report_steps(core, dispatch, 4)
    submit(core, seed=2)
    assert core.schedule() == []
    clock.advance(0.031)
    [ahead] = core.schedule()
    assert len(ahead.jobs) == 1 and ahead.worker_id == "w0"


def test_a_finishing_unit_that_waits_for_its_window_does_not_hold_back_an_idle_one():
    clock = FakeClock()
    core = make_core(clock, dispatching=DispatchPolicy(ahead=True, window_when_idle=False))
    core.register_worker(worker("w0"))
    submit(core)
    [busy] = core.schedule()
    report_steps(core, busy, 4)
    late = submit(core, seed=3)
    assert core.schedule() == []  # w0 is finishing; the window of `late` is open
    core.register_worker(worker("w1"))
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w1" and dispatch.jobs == (late,)
    assert late.state is JobState.DISPATCHED


def run_to_end(core, clock, dispatch, tail_s: float) -> None:
    """Report the batch's last steps, then its results and end `tail_s` later."""
    report_steps(core, dispatch, 4)
    clock.advance(tail_s)
    for job in dispatch.jobs:
        core.job_succeeded(job.job_id, dispatch.batch_id)
    core.batch_ended(dispatch.batch_id)


def test_once_the_tail_is_known_the_next_batch_forms_just_before_the_running_one_ends():
    clock = FakeClock()
    lead_s = 0.01
    policy = DispatchPolicy(ahead=True, window_when_idle=False, ahead_lead_s=lead_s)
    core = make_core(clock, dispatching=policy)
    core.register_worker(worker("w0"))
    for seed in range(4):
        submit(core, seed=seed)
    [first] = core.schedule()
    # The first batch teaches the model's tail: 0.2 s after the last step for 4 jobs.
    run_to_end(core, clock, first, 0.2)
    for seed in range(4):
        submit(core, seed=10 + seed)
    [second] = core.schedule()
    assert len(second.jobs) == 4
    clock.advance(1)
    report_steps(core, second, 4)
    early = submit(core, seed=20)
    clock.advance(0.05)
    # Its window has closed, but the running batch has 0.15 s to go: no batch yet, and
    # the core asks to be woken when the unit gets room.
    assert core.schedule() == []
    room_at = core.next_wakeup()
    assert room_at is not None and abs(room_at - (clock() + 0.2 - 0.05 - lead_s)) < 1e-9
    late = [submit(core, seed=30 + seed) for seed in range(2)]
    clock.advance(room_at - clock())
    [ahead] = core.schedule()
    assert ahead.worker_id == "w0"
    assert sorted(j.job_id for j in ahead.jobs) == sorted(j.job_id for j in [early, *late])


def test_before_any_tail_is_known_the_next_batch_goes_at_the_last_step():
    clock = FakeClock()
    policy = DispatchPolicy(ahead=True, window_when_idle=False, ahead_lead_s=0.01)
    core = make_core(clock, dispatching=policy)
    core.register_worker(worker("w0"))
    submit(core)
    [first] = core.schedule()
    submit(core, seed=2)
    clock.advance(1)
    report_steps(core, first, 4)
    [ahead] = core.schedule()
    assert ahead.worker_id == "w0"


def test_a_tail_shorter_than_the_lead_gives_room_at_the_last_step():
    clock = FakeClock()
    policy = DispatchPolicy(ahead=True, window_when_idle=False, ahead_lead_s=0.05)
    core = make_core(clock, dispatching=policy)
    core.register_worker(worker("w0"))
    submit(core)
    [first] = core.schedule()
    run_to_end(core, clock, first, 0.01)
    submit(core, seed=2)
    [second] = core.schedule()
    submit(core, seed=3)
    clock.advance(1)
    report_steps(core, second, 4)
    [ahead] = core.schedule()
    assert ahead.worker_id == "w0"


def _tail_learned_on(devices: tuple[str, ...], tail_end: str = "auto") -> float:
    """When a unit on `devices` next gets room, in seconds after its batch's last step,
    once a first batch's results came 0.1 s (the first) and 0.3 s (the last) after it."""
    clock = FakeClock()
    policy = DispatchPolicy(
        ahead=True, window_when_idle=False, ahead_lead_s=0.01, tail_end=tail_end
    )
    core = make_core(clock, dispatching=policy)
    core.register_worker(replace(worker("w0"), devices=devices))
    for seed in range(2):
        submit(core, seed=seed)
    [first] = core.schedule()
    report_steps(core, first, 4)
    clock.advance(0.1)
    core.job_succeeded(first.jobs[0].job_id, first.batch_id)
    clock.advance(0.2)
    core.job_succeeded(first.jobs[1].job_id, first.batch_id)
    core.batch_ended(first.batch_id)
    for seed in range(2):
        submit(core, seed=10 + seed)
    [second] = core.schedule()
    clock.advance(1)
    report_steps(core, second, 4)
    submit(core, seed=20)
    assert core.schedule() == []
    room_at = core.next_wakeup()
    assert room_at is not None
    return room_at - clock() + 0.01


def test_an_accelerator_gets_its_next_batch_as_the_first_result_comes_not_the_last():
    # The device is free once the batch has decoded; its results encode on the CPU while
    # the next batch computes.
    assert abs(_tail_learned_on(("cuda:0",)) - 0.1) < 1e-9


def test_a_cpu_worker_gets_its_next_batch_as_the_last_result_comes():
    # Its encoding takes the cores the next batch would compute on.
    assert abs(_tail_learned_on(("cpu",)) - 0.3) < 1e-9


def test_the_tail_end_can_be_set_for_every_device_kind():
    for devices in (("cuda:0",), ("cpu",)):
        assert abs(_tail_learned_on(devices, "first_result") - 0.1) < 1e-9, devices
        assert abs(_tail_learned_on(devices, "last_result") - 0.3) < 1e-9, devices


def test_the_tail_end_comes_from_the_settings():
    from mediamesh.common.settings import SchedulerSettings
    from mediamesh.scheduler.settings_policy import core_policy

    assert core_policy(SchedulerSettings()).dispatching.tail_end == "auto"
    chosen = SchedulerSettings(dispatch_ahead_tail_end="last_result")
    assert core_policy(chosen).dispatching.tail_end == "last_result"
