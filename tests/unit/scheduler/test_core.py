"""The scheduling policy with an injected clock: queues, batching, routing, lifecycle."""

from __future__ import annotations

import dataclasses

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.scheduler.core.effects import CancelOnWorker, Dispatch, Notice
from mediamesh.scheduler.core.jobs import JobState, Priority, TenantQuota
from mediamesh.scheduler.core.policy import DispatchPolicy
from mediamesh.scheduler.core.scheduler import Accepted, Rejection
from mediamesh.scheduler.core.units import Placement

from .fakes import FakeClock, make_core, new_job, worker


def submit(core, **kwargs):
    outcome = core.submit(new_job(**kwargs))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def test_submit_queues_and_dispatches_to_a_worker_hosting_the_model():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0", ("wan-tiny",)))
    core.register_worker(worker("w1", ("flux-tiny",)))
    job = submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w1"
    assert [j.job_id for j in dispatch.jobs] == [job.job_id]
    assert job.state is JobState.DISPATCHED


# The window on an idle device (scheduler.batch_window_when_idle); off by default.
WINDOW_WHEN_IDLE = DispatchPolicy(ahead=True, window_when_idle=True)


def test_dynamic_batch_waits_for_window_then_dispatches_partial():
    clock = FakeClock()
    core = make_core(clock, dispatching=WINDOW_WHEN_IDLE)
    core.register_worker(worker("w0"))
    submit(core)
    submit(core)
    assert core.schedule() == []  # max_batch 4, window 30 ms still open
    assert core.next_wakeup() == clock.now + 0.03
    clock.advance(0.031)
    [dispatch] = core.schedule()
    assert len(dispatch.jobs) == 2


def test_dynamic_batch_dispatches_at_once_when_full():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for _ in range(5):
        submit(core)
    [dispatch] = core.schedule()
    assert len(dispatch.jobs) == 4


def test_batch_never_mixes_compatibility_keys():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    submit(core, steps=4)
    submit(core, steps=8)
    submit(core, steps=4, width=128)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert len(dispatch.jobs) == 1


def test_realtime_goes_before_batch_work():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    bulk = [submit(core, priority=Priority.BATCH, steps=5) for _ in range(3)]
    urgent = submit(core, priority=Priority.REALTIME)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.jobs[0] is urgent
    assert all(j.state is JobState.QUEUED for j in bulk)


def test_aging_lets_batch_work_through_a_stream_of_realtime_work():
    clock = FakeClock()
    everywhere = Placement("on-demand", frozenset({"on-demand"}), 0.0)
    core = make_core(clock, aging_s_per_class=10.0, placements=dict.fromkeys(Priority, everywhere))
    core.register_worker(worker("w0"))
    old_bulk = submit(core, priority=Priority.BATCH, steps=5)
    clock.advance(25)  # 2.5 classes of aging: beats a fresh REALTIME job (0)
    submit(core, priority=Priority.REALTIME)
    [dispatch] = core.schedule()
    assert dispatch.jobs[0] is old_bulk


def test_earliest_deadline_first_among_equals():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    later = submit(core, deadline=clock.now + 500, steps=5)
    sooner = submit(core, deadline=clock.now + 100, steps=6)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.jobs[0] is sooner
    assert later.state is JobState.QUEUED


def test_fair_share_between_tenants_in_a_class():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for i in range(20):
        submit(core, tenant="bulk", steps=5, seed=i)
    single = submit(core, tenant="small", steps=6)
    order = []
    for _ in range(3):
        clock.advance(1)
        [dispatch] = core.schedule()
        order.append(dispatch.jobs[0].tenant)
        for job in dispatch.jobs:
            core.job_succeeded(job.job_id, dispatch.batch_id)
        core.batch_ended(dispatch.batch_id)
    assert "small" in order[:2]
    assert single.state is JobState.SUCCEEDED


def test_least_loaded_worker_gets_the_batch_and_ties_go_to_the_last_used():
    clock = FakeClock()
    core = make_core(clock)
    for name in ("w0", "w1"):
        core.register_worker(worker(name))

    def run_one() -> str:
        submit(core, steps=5)
        clock.advance(1)
        [dispatch] = core.schedule()
        for job in dispatch.jobs:
            core.job_succeeded(job.job_id, dispatch.batch_id)
        core.batch_ended(dispatch.batch_id)
        return dispatch.worker_id

    # One job at a time: every batch finds both idle and stays on the warm one.
    assert [run_one() for _ in range(3)] == ["w0", "w0", "w0"]
    # w0 busy: the idle w1 is the least loaded.
    submit(core, steps=5)
    clock.advance(1)
    [busy] = core.schedule()
    assert busy.worker_id == "w0"
    submit(core, steps=5)
    clock.advance(1)
    [beside] = core.schedule()
    assert beside.worker_id == "w1"
    for dispatch in (busy, beside):
        for job in dispatch.jobs:
            core.job_succeeded(job.job_id, dispatch.batch_id)
        core.batch_ended(dispatch.batch_id)
    # Both idle again: w1 had the latest batch.
    assert run_one() == "w1"


def test_busy_worker_gets_nothing_until_its_batch_ends():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    submit(core, steps=5)
    submit(core, steps=6)
    clock.advance(1)
    [first] = core.schedule()
    assert core.schedule() == []
    core.job_succeeded(first.jobs[0].job_id, first.batch_id)
    core.batch_ended(first.batch_id)
    [second] = core.schedule()
    assert second.jobs[0].params.steps == 6


def test_queue_depth_limit_rejects_with_retry_hint_and_does_not_accept():
    clock = FakeClock()
    core = make_core(clock)
    core.policy.queues["image"] = type(core.policy.queues["image"])(10.0, 2)
    submit(core)
    submit(core)
    outcome = core.submit(new_job())
    assert isinstance(outcome, Rejection)
    assert outcome.code == "RESOURCE_EXHAUSTED"
    assert "max_depth is 2" in outcome.message
    assert outcome.retry_after_s >= 1.0
    assert len(core.jobs) == 2


def test_deadline_that_cannot_be_met_is_rejected_at_submit():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for i in range(50):
        submit(core, steps=50, width=512, seed=i)
    outcome = core.submit(new_job(deadline=clock.now + 0.5))
    assert isinstance(outcome, Rejection)
    assert outcome.code is StatusCode.RESOURCE_EXHAUSTED and outcome.retry_after_s >= 1.0
    assert "deadline cannot be met" in outcome.message


def test_a_timeout_shorter_than_the_job_itself_is_refused_without_a_retry_hint():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))  # idle: the job's own time is what does not fit
    outcome = core.submit(new_job(steps=50, width=512, deadline=clock.now + 0.001))
    assert isinstance(outcome, Rejection)
    assert outcome.code is StatusCode.DEADLINE_EXCEEDED and outcome.retry_after_s == 0
    assert outcome.message.startswith("timeout_ms: 0.001 s left, and this job needs at least ")


def test_tenant_queued_limit():
    clock = FakeClock()
    core = make_core(clock)
    quota = TenantQuota(max_queued=1)
    submit(core, quota=quota)
    outcome = core.submit(new_job(quota=quota))
    assert isinstance(outcome, Rejection) and "limit is 1" in outcome.message


def test_same_idempotency_key_returns_the_same_job():
    clock = FakeClock()
    core = make_core(clock)
    first = submit(core, key="k1")
    again = core.submit(new_job(key="k1"))
    assert isinstance(again, Accepted) and again.deduplicated and again.job is first
    other_tenant = submit(core, key="k1", tenant="t2")
    assert other_tenant is not first


@pytest.mark.parametrize(
    ("change", "field_name"),
    [
        ({"model": "echo"}, "model"),
        ({"priority": Priority.REALTIME}, "priority"),
        ({"steps": 8}, "steps"),
        ({"seed": 43}, "seed"),
        ({"width": 128}, "width"),
    ],
)
def test_a_key_reused_for_another_request_is_refused_naming_the_field(change, field_name):
    core = make_core(FakeClock())
    first = submit(core, key="k1", seed=42)
    outcome = core.submit(new_job(**{"key": "k1", "seed": 42, **change}))
    assert isinstance(outcome, Rejection), outcome
    assert outcome.code is StatusCode.INVALID_ARGUMENT
    assert outcome.message.startswith(f"idempotency_key: 'k1' already names job {first.job_id}")
    assert f"whose {field_name} differs" in outcome.message


def test_a_retry_that_left_the_seed_to_the_mesh_matches_the_job_whatever_its_seed():
    core = make_core(FakeClock())
    first = submit(core, key="k1", seed=42)
    retry = dataclasses.replace(new_job(key="k1", seed=7), any_seed=True)
    again = core.submit(retry)
    assert isinstance(again, Accepted) and again.deduplicated and again.job is first


def test_cancel_queued_is_immediate_and_running_asks_the_worker():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    queued = submit(core, steps=5)
    core.cancel(queued.job_id)
    assert queued.state is JobState.CANCELLED
    running = submit(core, steps=6)
    clock.advance(1)
    [dispatch] = core.schedule()
    core.take_effects()
    core.cancel(running.job_id)
    effects = core.take_effects()
    assert running.state is JobState.CANCELLED
    assert any(isinstance(e, CancelOnWorker) and e.job_ids == (running.job_id,) for e in effects)
    core.job_succeeded(running.job_id, dispatch.batch_id)  # a late report is ignored
    assert running.state is JobState.CANCELLED


def test_deadline_expires_queued_and_running_jobs():
    clock = FakeClock()
    core = make_core(clock)
    queued = submit(core, deadline=clock.now + 5)
    clock.advance(6)
    core.expire_due()
    assert queued.state is JobState.EXPIRED
    assert queued.error_code == "DEADLINE_EXCEEDED"


def test_worker_loss_requeues_in_flight_jobs_at_the_front_then_gives_up():
    clock = FakeClock()
    core = make_core(clock, max_worker_losses=2)
    core.register_worker(worker("w0"))
    job = submit(core, steps=5)
    later = submit(core, steps=6)
    clock.advance(1)
    core.schedule()
    core.worker_lost("w0", "killed")
    assert job.state is JobState.QUEUED and job.at_front and job.worker_losses == 1
    core.register_worker(worker("w1"))
    [dispatch] = core.schedule()
    assert dispatch.jobs[0] is job
    assert later.state is JobState.QUEUED
    core.worker_lost("w1", "killed again")
    assert job.state is JobState.FAILED
    assert "gave up after 2 lost workers" in job.error_message


def test_an_undelivered_batch_requeues_its_jobs_without_using_up_their_retries():
    clock = FakeClock()
    core = make_core(clock, max_worker_losses=1)
    core.register_worker(worker("w0"))
    job = submit(core, steps=5)
    clock.advance(1)
    [dispatch] = core.schedule()
    for _ in range(3):
        core.batch_undelivered(dispatch.batch_id, "connection refused")
        assert job.state is JobState.QUEUED and job.at_front and job.worker_losses == 0
        # Dropped until it registers again, so the next pass cannot pick it straight back.
        assert "w0" not in core.units
        assert core.schedule() == []
        core.register_worker(worker("w0"))
        [dispatch] = core.schedule()
        assert dispatch.jobs == (job,)
    core.job_succeeded(job.job_id, dispatch.batch_id)
    assert job.state is JobState.SUCCEEDED


def test_heartbeat_timeout_declares_worker_dead():
    clock = FakeClock()
    core = make_core(clock, heartbeat_timeout_s=3.0)
    core.register_worker(worker("w0"))
    clock.advance(2)
    core.heartbeat("w0")
    clock.advance(2)
    assert core.check_liveness() == []
    clock.advance(2)
    assert core.check_liveness() == ["w0"]


def test_preempted_job_goes_to_the_front_with_its_checkpoint():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("spot0", pool="spot"))
    core.register_worker(worker("od0"))
    waiting = submit(core, steps=5)
    job = submit(core, priority=Priority.BATCH, steps=8)
    clock.advance(1)
    dispatches = {d.worker_id: d for d in core.schedule()}
    assert dispatches["spot0"].jobs == (job,)
    core.job_preempted(job.job_id, dispatches["spot0"].batch_id, "/ckpt/job.pt", 3)
    assert job.state is JobState.QUEUED and job.checkpoint == "/ckpt/job.pt" and job.step == 3
    assert waiting.state is JobState.DISPATCHED


def batch_on_spot_then_on_demand(fallback_after_s: float) -> dict[Priority, Placement]:
    return {
        Priority.REALTIME: Placement("on-demand", frozenset({"on-demand"}), 0.0),
        Priority.STANDARD: Placement("on-demand", frozenset({"on-demand"}), 0.0),
        Priority.BATCH: Placement("spot", frozenset({"spot", "on-demand"}), fallback_after_s),
    }


def test_batch_prefers_spot_and_falls_back_to_on_demand_after_the_wait():
    clock = FakeClock()
    core = make_core(clock, placements=batch_on_spot_then_on_demand(fallback_after_s=10.0))
    core.register_worker(worker("od0"))
    job = submit(core, priority=Priority.BATCH)
    clock.advance(1)
    assert core.schedule() == []
    assert core.next_wakeup() is not None
    clock.advance(10)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "od0" and job.spot_fallback
    assert core.spot_fallbacks["image"] == 1


def test_pool_demand_is_queued_work_for_the_pool_plus_work_running_on_it():
    """KEDA's metric: queued work counts where the jobs prefer to run, running work where it
    runs, so a BATCH job that fell back to on-demand moves from spot's demand to on-demand's."""
    clock = FakeClock()
    core = make_core(clock, placements=batch_on_spot_then_on_demand(fallback_after_s=10.0))
    core.register_worker(worker("od0"))
    bulk = submit(core, priority=Priority.BATCH, steps=8)
    assert core.pool_demand_s("image", "spot") == bulk.cost_s > 0
    assert core.pool_demand_s("image", "on-demand") == 0
    clock.advance(11)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "od0" and bulk.spot_fallback
    assert core.pool_demand_s("image", "spot") == 0
    assert core.pool_demand_s("image", "on-demand") == bulk.cost_s
    assert core.pool_work_s[("image", "on-demand")] == 0  # nothing queued: all of it runs

    waiting = submit(core, steps=5)
    assert core.pool_demand_s("image", "on-demand") == pytest.approx(bulk.cost_s + waiting.cost_s)
    core.job_succeeded(bulk.job_id, dispatch.batch_id)
    core.batch_ended(dispatch.batch_id)
    clock.advance(1)
    [second] = core.schedule()
    assert second.jobs == (waiting,)
    assert core.pool_demand_s("image", "on-demand") == pytest.approx(waiting.cost_s)
    core.worker_lost("od0", "killed")  # the job queues again: demand stays, as queued work
    assert core.pool_running_s[("image", "on-demand")] == 0
    assert core.pool_demand_s("image", "on-demand") == pytest.approx(waiting.cost_s)


def test_realtime_never_runs_on_spot_by_default():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("spot0", pool="spot"))
    submit(core, priority=Priority.REALTIME)
    clock.advance(100)
    assert core.schedule() == []


def test_draining_worker_gets_no_batches():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.heartbeat("w0", draining=True)
    submit(core)
    clock.advance(1)
    assert core.schedule() == []


def test_batch_ending_without_results_requeues_its_jobs():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    job = submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    core.batch_ended(dispatch.batch_id)
    assert job.state is JobState.QUEUED and job.worker_losses == 1


def test_progress_calibrates_the_cost_model_and_the_ledger():
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    job = submit(core)
    before = core.cost.step_s_per_unit("flux-tiny")
    clock.advance(1)
    [dispatch] = core.schedule()
    assert isinstance(dispatch, Dispatch)
    core.job_progress(job.job_id, dispatch.batch_id, 1, 4, step_seconds=0.02)
    assert job.state is JobState.RUNNING
    assert core.cost.step_s_per_unit("flux-tiny") != before
    assert core.ledger.by_pool["on-demand"] > 0


def test_a_wakeup_that_passed_while_the_owner_was_busy_still_counts():
    clock = FakeClock()
    core = make_core(clock, dispatching=WINDOW_WHEN_IDLE)
    core.register_worker(worker("w0"))
    submit(core)
    assert core.schedule() == []
    closes_at = core.next_wakeup()
    clock.advance(0.5)  # the owner was busy past the window's close
    assert core.next_wakeup() == closes_at <= clock.now


def _core_with_batching(clock, **batching):
    from mediamesh.common.registry import load_registry
    from mediamesh.common.settings import QueueSettings, SchedulerSettings
    from mediamesh.scheduler.core.scheduler import SchedulerCore
    from mediamesh.scheduler.settings_policy import core_policy

    specs = []
    for spec in load_registry().models:
        if spec.name == "flux-tiny":
            spec = spec.model_copy(update={"batching": spec.batching.model_copy(update=batching)})
        specs.append(spec)
    queues = {q: QueueSettings(sla_s=10.0, max_depth=100) for q in ("image", "video", "audio")}
    policy = core_policy(SchedulerSettings(queues=queues))
    ids = iter(range(1000))
    return SchedulerCore(specs, policy, clock, lambda: f"job-{next(ids)}")


def test_static_batching_waits_for_a_full_batch_without_a_cap():
    clock = FakeClock()
    core = _core_with_batching(clock, mode="static", max_batch=3, max_wait_ms=None)
    core.register_worker(worker("w0"))
    submit(core)
    submit(core)
    clock.advance(3600)
    assert core.schedule() == []
    submit(core)
    [dispatch] = core.schedule()
    assert len(dispatch.jobs) == 3


def test_static_batching_with_a_cap_dispatches_partial_after_it():
    clock = FakeClock()
    core = _core_with_batching(clock, mode="static", max_batch=3, max_wait_ms=500)
    core.register_worker(worker("w0"))
    submit(core)
    assert core.schedule() == []
    clock.advance(0.6)
    [dispatch] = core.schedule()
    assert len(dispatch.jobs) == 1


def test_no_batching_sends_jobs_one_by_one_at_once():
    clock = FakeClock()
    core = _core_with_batching(clock, mode="none", max_batch=8)
    core.register_worker(worker("w0"))
    core.register_worker(worker("w1"))
    submit(core)
    submit(core)
    dispatches = core.schedule()
    assert [len(d.jobs) for d in dispatches] == [1, 1]


def _batch_job_running_on_spot():
    """A core, its clock, a BATCH job of 8 steps and the batch running it on a spot worker."""
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("spot0", pool="spot"))
    job = submit(core, priority=Priority.BATCH, steps=8)
    clock.advance(1)
    [first] = core.schedule()
    return clock, core, job, first


def test_a_job_handed_back_unstarted_is_no_preemption_and_keeps_its_step():
    clock, core, job, first = _batch_job_running_on_spot()
    assert core.job_preempted(job.job_id, first.batch_id, "/ckpt/job-step5.pt", 5)
    core.batch_ended(first.batch_id)
    core.take_effects()
    [second] = core.schedule()
    # The worker drains before the job's resumed attempt runs: the same checkpoint comes back.
    assert not core.job_preempted(job.job_id, second.batch_id, "/ckpt/job-step5.pt", 0)
    core.batch_ended(second.batch_id)
    assert job.state is JobState.QUEUED
    assert (job.checkpoint, job.step) == ("/ckpt/job-step5.pt", 5)
    assert sum(core.preemptions.values()) == 1
    notices = [e for e in core.take_effects() if isinstance(e, Notice)]
    assert [(n.kind, n.message) for n in notices] == [
        ("requeued", "handed back before it ran: its worker drains")
    ]
    # The worker it left, though the job names none any more when the notice goes out.
    assert [n.worker_id for n in notices] == ["spot0"] and job.worker_id is None
    # And one that never had a checkpoint comes back with none.
    fresh = submit(core, priority=Priority.BATCH, steps=8)
    clock.advance(1)
    batches = {j.job_id: d for d in core.schedule() for j in d.jobs}
    assert not core.job_preempted(fresh.job_id, batches[fresh.job_id].batch_id, "", 0)
    assert fresh.checkpoint is None and sum(core.preemptions.values()) == 1


def test_a_job_that_ran_but_could_not_save_a_newer_checkpoint_is_preempted():
    clock, core, job, first = _batch_job_running_on_spot()
    core.job_checkpointed(job.job_id, first.batch_id, "/ckpt/job-step2.pt", 2)
    core.job_progress(job.job_id, first.batch_id, 3, 8)
    core.take_effects()
    # Its worker drains and cannot write the step-3 checkpoint (a full disk): the job comes
    # back with the one it had, after running past it.
    assert core.job_preempted(job.job_id, first.batch_id, "/ckpt/job-step2.pt", 2)
    assert sum(core.preemptions.values()) == 1
    assert (job.state, job.checkpoint, job.step) == (JobState.QUEUED, "/ckpt/job-step2.pt", 2)
    notices = [e for e in core.take_effects() if isinstance(e, Notice)]
    assert [(n.kind, n.message) for n in notices] == [
        ("preempted", "preempted at step 3; no newer checkpoint was saved: it resumes from step 2")
    ]
    core.batch_ended(first.batch_id)
    # Without any checkpoint it starts over.
    fresh = submit(core, priority=Priority.BATCH, steps=8)
    clock.advance(1)
    batches = {j.job_id: d for d in core.schedule() for j in d.jobs}
    core.job_progress(fresh.job_id, batches[fresh.job_id].batch_id, 4, 8)
    core.take_effects()
    assert core.job_preempted(fresh.job_id, batches[fresh.job_id].batch_id, "", 4)
    assert (fresh.checkpoint, fresh.step) == (None, 0)
    notices = [e for e in core.take_effects() if isinstance(e, Notice)]
    assert [n.message for n in notices] == [
        "preempted at step 4; no newer checkpoint was saved: it starts over"
    ]
