"""Step-boundary preemption in the core: when a lower-class batch is paused for urgent work."""

from __future__ import annotations

import dataclasses

from mediamesh.common.settings import QueueSettings, SchedulerSettings
from mediamesh.scheduler.core.jobs import JobState, Priority
from mediamesh.scheduler.core.policy import PausePolicy, QueuePolicy
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.core.units import Placement
from mediamesh.scheduler.settings_policy import core_policy

from .fakes import FakeClock, new_job, worker
from .fakes import make_core as make_any_core

# 5000 steps of flux-tiny at 64x64 cost ~40 device-seconds: past the image SLA of 10 s.
LONG_STEPS = 5000


def make_core(clock, **overrides):
    """Every class runs on the on-demand worker at once (BATCH would wait for spot)."""
    everywhere = Placement("on-demand", frozenset({"on-demand"}), 0.0)
    return make_any_core(clock, placements=dict.fromkeys(Priority, everywhere), **overrides)


def submit(core, **kwargs):
    outcome = core.submit(new_job(**kwargs))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def running_bulk(core, clock, steps: int = LONG_STEPS, done: int = 3):
    """A BATCH batch of two jobs on the one worker, `done` steps in."""
    core.register_worker(worker("w0"))
    bulk = [submit(core, priority=Priority.BATCH, steps=steps, seed=i) for i in range(2)]
    clock.advance(1)
    [dispatch] = core.schedule()
    for job in bulk:
        core.job_progress(job.job_id, dispatch.batch_id, done, steps)
    core.take_effects()
    return dispatch, bulk


def test_realtime_job_that_would_miss_its_sla_pauses_the_batch_batch():
    clock = FakeClock()
    core = make_core(clock)
    paused, bulk = running_bulk(core, clock)
    urgent = submit(core, priority=Priority.REALTIME)
    # At once: its batch window would keep the paused batch waiting too.
    [dispatch] = core.schedule()
    assert dispatch.pauses == paused.batch_id
    assert dispatch.worker_id == "w0" and dispatch.jobs == (urgent,)
    assert [j.pauses for j in bulk] == [1, 1]
    assert core.pauses[Priority.REALTIME] == 1
    # Both batches are open on the worker; it takes nothing more until the urgent one ends.
    assert core.units["w0"].batches == {paused.batch_id, dispatch.batch_id}
    submit(core, priority=Priority.REALTIME, seed=9)
    clock.advance(1)
    assert core.schedule() == []
    core.job_succeeded(urgent.job_id, dispatch.batch_id)
    core.batch_ended(dispatch.batch_id)
    assert core.schedule() == []  # the paused batch resumes there, with the slot
    assert all(j.state is JobState.RUNNING for j in bulk)


def test_no_pause_when_the_running_batch_ends_in_time():
    clock = FakeClock()
    core = make_core(clock)
    running_bulk(core, clock, steps=40)  # ~0.3 device-seconds left
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    assert core.schedule() == []


def test_no_pause_that_would_make_a_paused_job_miss_its_own_deadline():
    # An accepted job was taken on the promise of meeting its deadline: pausing it for an
    # urgent job let it expire, where alone it finished in time.
    clock = FakeClock()
    core = make_core(clock)
    paused, bulk = running_bulk(core, clock)
    left = sum(job.cost_s * job.remaining_fraction for job in bulk)
    bulk[0].deadline = clock() + left + 1e-3  # in time only if nothing goes before it
    submit(core, priority=Priority.REALTIME)
    assert core.schedule() == []
    assert [job.pauses for job in bulk] == [0, 0]
    bulk[0].deadline = clock() + left + 60.0  # room for the urgent job
    [dispatch] = core.schedule()
    assert dispatch.pauses == paused.batch_id


def test_no_pause_within_a_jobs_first_steps():
    clock = FakeClock()
    core = make_core(clock)
    running_bulk(core, clock, done=1)  # the default guard is 2 steps
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    assert core.schedule() == []


def test_no_pause_for_work_of_the_same_class():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    standard = submit(core, priority=Priority.STANDARD, steps=LONG_STEPS)
    clock.advance(1)
    [running] = core.schedule()
    core.job_progress(standard.job_id, running.batch_id, 3, LONG_STEPS)
    submit(core, priority=Priority.STANDARD)
    clock.advance(1)
    assert core.schedule() == []


def test_a_job_is_paused_at_most_max_per_job_times():
    clock = FakeClock()
    core = make_core(clock)
    _, bulk = running_bulk(core, clock)
    first = submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    [urgent] = core.schedule()
    core.job_succeeded(first.job_id, urgent.batch_id)
    core.batch_ended(urgent.batch_id)
    submit(core, priority=Priority.REALTIME, seed=5)
    clock.advance(1)
    assert core.schedule() == []
    assert [j.pauses for j in bulk] == [1, 1]


def test_pausing_off_when_max_per_job_is_zero():
    clock = FakeClock()
    core = make_core(clock, pausing=PausePolicy(max_per_job=0, min_steps=0))
    running_bulk(core, clock)
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    assert core.schedule() == []


def test_paused_jobs_resume_from_their_checkpoint_elsewhere_when_the_worker_is_lost():
    clock = FakeClock()
    core = make_core(clock)
    paused, bulk = running_bulk(core, clock)
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    [urgent] = core.schedule()
    assert urgent.pauses == paused.batch_id
    # What the worker reports as it pauses: a checkpoint per job.
    for job in bulk:
        core.job_checkpointed(job.job_id, paused.batch_id, f"ckpt/{job.job_id}@3", 3)
    core.worker_lost("w0", "gone")
    core.register_worker(worker("w1"))
    dispatches = []
    for _ in range(2):  # the requeued urgent job goes first, then the paused ones
        clock.advance(1)
        for dispatch in core.schedule():
            dispatches.append(dispatch)
            if not any(j in bulk for j in dispatch.jobs):
                for job in dispatch.jobs:
                    core.job_succeeded(job.job_id, dispatch.batch_id)
                core.batch_ended(dispatch.batch_id)
    resumed = [j for d in dispatches for j in d.jobs if j in bulk]
    assert sorted(j.job_id for j in resumed) == sorted(j.job_id for j in bulk)
    assert all(j.checkpoint == f"ckpt/{j.job_id}@3" and j.worker_id == "w1" for j in resumed)
    assert all(not d.pauses for d in dispatches)


def test_policy_comes_from_the_settings():
    clock = FakeClock()
    core = make_core(clock)
    assert dataclasses.asdict(core.policy.pausing) == {"max_per_job": 1, "min_steps": 2}


def _queues_with_realtime_sla(realtime_sla_s: float) -> dict[str, QueuePolicy]:
    return {
        "image": QueuePolicy(10.0, 100, {Priority.REALTIME: realtime_sla_s}),
        "video": QueuePolicy(120.0, 100),
        "audio": QueuePolicy(30.0, 100),
    }


def test_a_class_with_its_own_tighter_sla_pauses_a_batch_the_queue_sla_would_wait_for():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    paused, _ = running_bulk(core, clock, steps=40)  # ~0.3 device-seconds left: < 10 s
    urgent = submit(core, priority=Priority.REALTIME)
    [dispatch] = core.schedule()
    assert dispatch.pauses == paused.batch_id and dispatch.jobs == (urgent,)


def test_other_classes_keep_the_queue_sla():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    running_bulk(core, clock, steps=40)
    submit(core, priority=Priority.STANDARD)
    clock.advance(0.01)
    assert core.schedule() == []


def test_class_slas_come_from_the_settings():
    settings = SchedulerSettings(
        queues={"image": QueueSettings(sla_s=10.0, class_sla_s={"realtime": 0.05})}
    )
    image = core_policy(settings).queues["image"]
    assert image.sla_for(Priority.REALTIME) == 0.05
    assert image.sla_for(Priority.STANDARD) == image.sla_for(Priority.BATCH) == 10.0


def finishing_with_one_ahead(core, clock, ahead_priority=Priority.BATCH):
    """w0 runs a BATCH batch at its last step, with the next batch given ahead behind it."""
    core.register_worker(worker("w0"))
    running = [submit(core, priority=Priority.BATCH, seed=i) for i in range(4)]
    [first] = core.schedule()
    assert sorted(j.job_id for j in first.jobs) == sorted(j.job_id for j in running)
    for seed in range(3):
        submit(core, priority=ahead_priority, seed=10 + seed)
    clock.advance(1)
    for job in running:
        core.job_progress(job.job_id, first.batch_id, 4, 4)
    [ahead] = core.schedule()
    core.take_effects()
    return first, ahead


def test_an_urgent_job_goes_before_a_batch_given_ahead_that_has_not_started():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    first, ahead = finishing_with_one_ahead(core, clock)
    urgent = submit(core, priority=Priority.REALTIME, seed=99)
    [dispatch] = core.schedule()
    # Not the finishing batch (it ends sooner than a pause would help): the one behind it,
    # which the urgent batch overtakes on the worker before it starts.
    assert dispatch.pauses == ahead.batch_id and dispatch.jobs == (urgent,)
    assert all(j.pauses == 1 for j in ahead.jobs)
    assert core.units["w0"].batches == {first.batch_id, ahead.batch_id, dispatch.batch_id}


def test_no_urgent_job_overtakes_a_batch_of_its_own_class():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    finishing_with_one_ahead(core, clock, ahead_priority=Priority.REALTIME)
    submit(core, priority=Priority.REALTIME, seed=99)
    assert core.schedule() == []


def test_an_urgent_job_pauses_the_batch_computing_beside_one_that_only_encodes():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    _, ahead = finishing_with_one_ahead(core, clock)
    # The batch given ahead has the device and is past the guard's first steps, while the
    # first batch's stream stays open for its results' encoding.
    for job in ahead.jobs:
        core.job_progress(job.job_id, ahead.batch_id, 2, 4)
    core.take_effects()
    urgent = submit(core, priority=Priority.REALTIME, seed=99)
    [dispatch] = core.schedule()
    assert dispatch.pauses == ahead.batch_id and dispatch.jobs == (urgent,)
    assert all(j.pauses == 1 for j in ahead.jobs)


def test_the_batch_beside_an_encoding_one_keeps_the_first_steps_guard():
    clock = FakeClock()
    core = make_core(clock, queues=_queues_with_realtime_sla(0.1))
    _, ahead = finishing_with_one_ahead(core, clock)
    for job in ahead.jobs:
        core.job_progress(job.job_id, ahead.batch_id, 1, 4)  # the default guard is 2 steps
    core.take_effects()
    submit(core, priority=Priority.REALTIME, seed=99)
    assert core.schedule() == []


def test_a_job_reads_paused_from_its_workers_notice_until_it_resumes():
    clock = FakeClock()
    core = make_core(clock)
    paused, bulk = running_bulk(core, clock)
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    [urgent] = core.schedule()
    assert urgent.pauses == paused.batch_id
    # Asked, not done: the batch computes until its next step boundary.
    assert not any(core.is_paused(j) for j in bulk)
    assert core.paused_count("image") == 0
    for job in bulk:
        core.job_paused(job.job_id, paused.batch_id)
    assert all(core.is_paused(j) and j.state is JobState.RUNNING for j in bulk)
    assert core.paused_count("image") == 2
    # `running` still holds them: a status that shows what computes takes them out.
    assert core.running["image"] == 3
    for job in bulk:
        core.job_resumed(job.job_id)
    assert not any(core.is_paused(j) for j in bulk)
    assert core.paused_count("image") == 0


def test_a_paused_job_that_leaves_its_batch_is_no_longer_paused():
    clock = FakeClock()
    core = make_core(clock)
    paused, bulk = running_bulk(core, clock)
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    core.schedule()
    for job in bulk:
        core.job_paused(job.job_id, paused.batch_id)
    # No resume notice comes from a lost worker; the jobs go back in line.
    core.worker_lost("w0", "gone")
    assert not any(core.is_paused(j) for j in bulk)
    assert core.paused_count("image") == 0
    # A late notice of the batch the job left does not mark it either.
    core.job_paused(bulk[0].job_id, paused.batch_id)
    assert not core.is_paused(bulk[0])


def test_an_idle_worker_of_a_pool_the_urgent_class_may_not_use_does_not_stop_the_pause():
    """REALTIME stays on on-demand: a free spot worker is no help to it, so the BATCH batch
    on the on-demand worker is paused as if the spot one were not there."""
    clock = FakeClock()
    on_demand = Placement("on-demand", frozenset({"on-demand"}), 0.0)
    placements = dict.fromkeys(Priority, on_demand)
    core = make_any_core(clock, placements=placements)
    paused, _ = running_bulk(core, clock)
    core.register_worker(worker("spot-0", pool="spot"))
    urgent = submit(core, priority=Priority.REALTIME)
    [dispatch] = core.schedule()
    assert dispatch.pauses == paused.batch_id
    assert dispatch.worker_id == "w0" and dispatch.jobs == (urgent,)


def test_a_batch_on_a_pool_the_urgent_class_may_not_use_is_not_paused_for_it():
    """The victim is chosen among the urgent class's pools only: a BATCH batch on spot is
    left alone for a REALTIME job that may not run there."""
    clock = FakeClock()
    placements = dict.fromkeys(Priority, Placement("on-demand", frozenset({"on-demand"}), 0.0))
    placements[Priority.BATCH] = Placement("spot", frozenset({"spot"}), 0.0)
    core = make_any_core(clock, placements=placements)
    core.register_worker(worker("spot-0", pool="spot"))
    bulk = submit(core, priority=Priority.BATCH, steps=LONG_STEPS)
    clock.advance(1)
    [running] = core.schedule()
    core.job_progress(bulk.job_id, running.batch_id, 3, LONG_STEPS)
    submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    assert core.schedule() == []
    assert core.pauses[Priority.REALTIME] == 0
