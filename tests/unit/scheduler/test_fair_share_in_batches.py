"""Tenant weights hold inside a batch: its companions are chosen by weighted fair share, as
its lead is, not in arrival order across tenants (which let the tenant that queued first
fill every batch: AGGG, AGGG, ... for weights alpha 3, gamma 1)."""

from __future__ import annotations

from mediamesh.scheduler.core.jobs import Job, TenantQuota
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore

from .fakes import FakeClock, make_core, new_job, worker

WEIGHTS = {"alpha": TenantQuota(weight=3.0), "gamma": TenantQuota(weight=1.0)}


def submit(core: SchedulerCore, tenant: str, seed: int) -> Job:
    outcome = core.submit(new_job(tenant=tenant, seed=seed, quota=WEIGHTS.get(tenant)))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def run_batches(core: SchedulerCore, clock: FakeClock) -> list[str]:
    """Each batch's tenants by initial (its lead first), running one batch at a time."""
    batches = []
    while True:
        clock.advance(1)  # past the batch window
        dispatched = core.schedule()
        if not dispatched:
            return batches
        [batch] = dispatched
        batches.append("".join(job.tenant[0].upper() for job in batch.jobs))
        for job in batch.jobs:
            core.job_succeeded(job.job_id, batch.batch_id)
        core.batch_ended(batch.batch_id)


def start_blocked(tenants_in_order: tuple[str, ...], each: int) -> tuple[SchedulerCore, FakeClock]:
    """One worker (max_batch 4) busy with a blocker while the tenants queue `each` jobs."""
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    submit(core, "blocker", 0)
    clock.advance(1)
    [blocking] = core.schedule()
    seed = 1
    for tenant in tenants_in_order:
        for _ in range(each):
            submit(core, tenant, seed)
            seed += 1
    for job in blocking.jobs:
        core.job_succeeded(job.job_id, blocking.batch_id)
    core.batch_ended(blocking.batch_id)
    return core, clock


def test_a_tenant_of_weight_3_gets_three_slots_to_one_while_both_are_backlogged() -> None:
    core, clock = start_blocked(("gamma", "alpha"), 16)
    batches = run_batches(core, clock)
    assert "".join(batches).count("A") == 16 and "".join(batches).count("G") == 16
    assert all(len(b) == 4 for b in batches)
    # While both have jobs queued (the first four batches), alpha gets 3 of every 4 slots,
    # though gamma queued all of its jobs first.
    backlogged = "".join(batches[:4])
    assert backlogged.count("A") == 12 and backlogged.count("G") == 4, batches


def test_equal_weights_share_each_batch_evenly() -> None:
    core, clock = start_blocked(("gamma", "beta"), 8)
    batches = run_batches(core, clock)
    assert all(sorted(b) == ["B", "B", "G", "G"] for b in batches), batches


def test_one_tenant_fills_batches_in_arrival_order() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    jobs = [submit(core, "alpha", seed) for seed in range(8)]
    clock.advance(1)
    [first] = core.schedule()
    assert [j.job_id for j in first.jobs] == [j.job_id for j in jobs[:4]]
