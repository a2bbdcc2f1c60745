"""A unit that must load a batch's LoRA adapters first is charged the learned load time with
the batch: its load and the finish estimates count it until the batch's jobs end, so the
next batch goes elsewhere when the load makes this unit the busier one."""

from __future__ import annotations

import pytest

from mediamesh.common.generation import AdapterScale
from mediamesh.scheduler.core.affinity import AffinityPolicy
from mediamesh.scheduler.core.jobs import Priority
from mediamesh.scheduler.core.scheduler import SchedulerCore

from .fakes import FakeClock, make_core, roomy, worker
from .fakes import submit_with_adapters as submit

STYLE = (AdapterScale("style", 1.0),)
# Far above any tiny job's cost, so a routing decision cannot be explained by the job alone.
LOAD_S = 30.0


def core_with_prior(clock: FakeClock) -> SchedulerCore:
    return make_core(clock, adapter_affinity=AffinityPolicy(margin_s=1.0, load_prior_s=LOAD_S))


def test_a_cold_unit_carries_the_adapter_load_until_the_batch_ends() -> None:
    clock = FakeClock()
    core = core_with_prior(clock)
    core.register_worker(worker("w0"))
    job = submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"
    assert core.units["w0"].load_s == pytest.approx(job.cost_s + LOAD_S)
    assert core.pool_running_s[("image", "on-demand")] == pytest.approx(job.cost_s + LOAD_S)
    # A new job's finish estimate waits behind the load as well as the work.
    assert core.estimate_finish_s("flux-tiny", Priority.STANDARD, 0.0) == pytest.approx(
        job.cost_s + LOAD_S
    )
    core.job_succeeded(job.job_id, dispatch.batch_id)
    core.batch_ended(dispatch.batch_id)
    assert core.units["w0"].load_s == pytest.approx(0.0)
    assert core.pool_running_s[("image", "on-demand")] == pytest.approx(0.0)


def test_the_learned_load_time_is_what_is_charged() -> None:
    clock = FakeClock()
    core = core_with_prior(clock)
    core.register_worker(worker("w0"))
    # Another worker measured this adapter: that replaces the prior.
    core.register_worker(worker("w9"))
    core.adapters_loaded("w9", {"flux-tiny": {"style": 2.5}})
    core.worker_lost("w9", "gone")
    job = submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"
    assert core.units["w0"].load_s == pytest.approx(job.cost_s + 2.5)


def test_a_unit_with_the_adapters_loaded_pays_nothing_more() -> None:
    clock = FakeClock()
    core = core_with_prior(clock)
    core.register_worker(worker("w0"))
    core.adapters_loaded("w0", {"flux-tiny": {"style": LOAD_S}})
    job = submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"
    assert core.units["w0"].load_s == pytest.approx(job.cost_s)


def test_the_load_is_charged_once_per_unit_and_shared_by_the_batch() -> None:
    clock = FakeClock()
    core = core_with_prior(clock)
    core.register_worker(roomy("w0"))
    pair = [submit(core, STYLE, seed=s) for s in (1, 2)]
    clock.advance(1)
    [first] = core.schedule()
    assert sorted(j.job_id for j in first.jobs) == sorted(j.job_id for j in pair)
    assert core.units["w0"].load_s == pytest.approx(sum(j.cost_s for j in pair) + LOAD_S)
    # One job ending takes its half of the load with it.
    core.job_succeeded(pair[0].job_id, first.batch_id)
    assert core.units["w0"].load_s == pytest.approx(pair[1].cost_s + LOAD_S / 2)
    # The unit now counts the adapter as loaded: the next batch with it is not charged again.
    later = submit(core, STYLE, steps=8)
    clock.advance(1)
    [second] = core.schedule()
    assert second.worker_id == "w0"
    assert core.units["w0"].load_s == pytest.approx(pair[1].cost_s + LOAD_S / 2 + later.cost_s)


def test_the_charged_load_steers_the_next_batch_away_from_the_cold_unit() -> None:
    clock = FakeClock()
    core = core_with_prior(clock)
    core.register_worker(roomy("w1"))
    heavy = submit(core, steps=50, width=512)
    clock.advance(1)
    [first] = core.schedule()
    assert first.worker_id == "w1" and core.units["w1"].load_s == pytest.approx(heavy.cost_s)
    core.register_worker(roomy("w0"))
    # Neither unit has the adapter: the idle w0 takes it, and must load it.
    styled = submit(core, STYLE)
    clock.advance(1)
    [second] = core.schedule()
    assert second.worker_id == "w0"
    # Without the load w0 would be the less loaded unit by far; with it, w1 is.
    assert styled.cost_s < heavy.cost_s < styled.cost_s + LOAD_S
    plain = submit(core)
    clock.advance(1)
    [third] = core.schedule()
    assert third.jobs[0].job_id == plain.job_id
    assert third.worker_id == "w1"
