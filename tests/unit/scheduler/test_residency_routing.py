"""Model residency in the scheduler core: a batch goes to a unit with its model loaded,
and to a unit that must load it first only when that unit's load plus the (measured) load
time beats the resident units' load."""

from __future__ import annotations

import dataclasses

from mediamesh.scheduler.core.residency import ResidencyPolicy
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.core.units import WorkerInfo

from .fakes import FakeClock, make_core, new_job, worker


def submit(core, **kwargs):
    outcome = core.submit(new_job(**kwargs))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def roomy(worker_id: str) -> WorkerInfo:
    """A worker that takes two batches at once: it can carry load and still have room."""
    return dataclasses.replace(worker(worker_id), capacity=2)


def test_the_unit_with_the_model_resident_is_preferred() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.register_worker(worker("w1"))
    core.models_resident("w0", {"flux-tiny": (False, 0.0)})
    core.models_resident("w1", {"flux-tiny": (True, 2.0)})
    submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    # w0 sorts first at equal load, but it would have to load the model.
    assert dispatch.worker_id == "w1"
    assert core.residency.resident_choices == 1
    assert core.residency.load_s("flux-tiny") == 2.0


def _busy_resident_unit_and_cold_unit(load_prior_s: float, measured_s: float = 0.0):
    """w1 has flux-tiny resident and about 3.3 device-seconds of work; w0 is idle, cold."""
    clock = FakeClock()
    core = make_core(clock, residency=ResidencyPolicy(load_prior_s))
    core.register_worker(roomy("w1"))
    submit(core, steps=50, width=512)
    clock.advance(1)
    [first] = core.schedule()
    assert first.worker_id == "w1" and 3 < core.units["w1"].load_s < 5
    core.register_worker(worker("w0"))
    core.models_resident("w0", {"flux-tiny": (False, 0.0)})
    core.models_resident("w1", {"flux-tiny": (True, measured_s)})
    return clock, core


def test_a_cold_unit_wins_when_the_resident_one_is_busier_than_the_load_time() -> None:
    clock, core = _busy_resident_unit_and_cold_unit(load_prior_s=10.0, measured_s=0.5)
    # The measurement replaces the prior: loading takes 0.5 s, less than w1's queue.
    assert core.residency.load_s("flux-tiny") == 0.5
    submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"
    assert core.residency.cold_starts == 1
    # The cold unit counts the model as loaded from now on, until its next report.
    assert "flux-tiny" not in core.units["w0"].cold


def test_a_slow_load_keeps_the_batch_on_the_busy_resident_unit() -> None:
    clock, core = _busy_resident_unit_and_cold_unit(load_prior_s=10.0)
    submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w1"
    assert core.residency.cold_starts == 0


def test_a_batch_waits_for_a_full_resident_unit_rather_than_start_cold() -> None:
    clock = FakeClock()
    core = make_core(clock, residency=ResidencyPolicy(load_prior_s=30.0))
    core.register_worker(worker("w1"))
    core.models_resident("w1", {"flux-tiny": (True, 0.0)})
    first_job = submit(core, steps=4)
    clock.advance(1)
    [first] = core.schedule()
    assert first.worker_id == "w1" and core.units["w1"].free_slots == 0
    core.register_worker(worker("w0"))
    core.models_resident("w0", {"flux-tiny": (False, 0.0)})
    submit(core)
    clock.advance(1)
    # w1 is full but far less loaded than a 30 s load on w0: the job waits.
    assert core.schedule() == []
    core.job_succeeded(first_job.job_id, first.batch_id)
    core.batch_ended(first.batch_id)
    [second] = core.schedule()
    assert second.worker_id == "w1"
    assert core.residency.cold_starts == 0


def test_reports_keep_only_hosted_models_and_repeated_loads_teach_once() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.models_resident("w0", {"flux-tiny": (False, 4.0), "not-hosted": (False, 1.0)})
    assert core.units["w0"].cold == frozenset({"flux-tiny"})
    core.models_resident("w0", {"flux-tiny": (True, 4.0)})
    core.models_resident("w0", {"flux-tiny": (True, 4.0)})
    assert core.units["w0"].cold == frozenset()
    assert core.residency.load_s("flux-tiny") == 4.0
    assert core.residency.load_s("not-hosted") != 1.0
