"""Arrival processes: counts, ordering, rates, and replayed traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mediamesh.sim.arrivals import generate
from mediamesh.sim.scenario import Arrivals, Workload

MODELS = {"flux-tiny": 3.0, "echo": 1.0}


def workload(**arrivals: object) -> Workload:
    return Workload(jobs=20_000, arrivals=Arrivals(**arrivals), models=MODELS)


def test_poisson_has_the_requested_count_rate_and_mix() -> None:
    plan = generate(workload(process="poisson", rate_per_s=50), seed=1)
    assert len(plan) == 20_000
    assert np.all(np.diff(plan.times) >= 0)
    assert abs(len(plan) / plan.times[-1] - 50) < 2
    share = float((plan.model == plan.models.index("flux-tiny")).mean())
    assert abs(share - 0.75) < 0.02


def test_bursty_alternates_dense_and_sparse_spells() -> None:
    plan = generate(
        workload(
            process="bursty",
            burst_rate_per_s=100,
            idle_rate_per_s=1,
            mean_burst_s=10,
            mean_idle_s=30,
        ),
        seed=2,
    )
    gaps = np.diff(plan.times)
    assert len(plan) == 20_000 and np.all(gaps >= 0)
    # Mostly 10 ms gaps inside bursts, but some second-long ones between them.
    assert np.median(gaps) < 0.05
    assert gaps.max() > 1.0


def test_diurnal_rate_follows_the_sinusoid() -> None:
    plan = generate(
        workload(process="diurnal", rate_per_s=20, amplitude=0.8, period_s=1000), seed=3
    )
    phase = (plan.times % 1000) / 1000
    # sin > 0 in the first half of each period: there the rate is above the mean.
    rising = int((phase < 0.5).sum())
    assert rising > 2.5 * (len(plan) - rising)


def test_a_trace_is_replayed_in_time_order(tmp_path: Path) -> None:
    rows = [
        {"t": 2.0, "model": "echo", "priority": "BATCH", "tenant": "x"},
        {"t": 0.5, "model": "flux-tiny"},
        {"t": 1.0, "model": "echo", "priority": "REALTIME", "tenant": "y"},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    plan = generate(workload(process="trace", path=path), seed=0)
    assert plan.times.tolist() == [0.5, 1.0, 2.0]
    assert [plan.models[m] for m in plan.model] == ["flux-tiny", "echo", "echo"]
    assert plan.priority.tolist() == [1, 0, 2]
    assert [plan.tenants[t] for t in plan.tenant] == ["default", "y", "x"]
