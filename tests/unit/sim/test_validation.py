"""The validation hook: a small local mesh from measured batch times, and the device fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediamesh.common.settings import SchedulerSettings
from mediamesh.sim.validation import (
    MeasuredBatch,
    fit_device,
    simulate_small_for_validation,
    write_trace,
)


def test_an_underloaded_mesh_keeps_up_with_arrivals() -> None:
    result = simulate_small_for_validation(
        {"flux-tiny": 0.02, "echo": 0.001}, workers=2, jobs=300, rate_per_s=5.0
    )
    assert result.succeeded == result.jobs == 300
    assert 4.0 < result.throughput_jobs_per_s < 6.0
    assert result.wait_s["p50"] is not None and result.wait_s["p50"] < 0.1
    assert result.latency_s["p99"] >= result.latency_s["p50"]


def test_an_overloaded_mesh_runs_at_its_capacity() -> None:
    # One worker, 0.5 s per step x 4 steps: about 0.5 jobs/s unbatched, more when batched.
    result = simulate_small_for_validation(
        {"flux-tiny": 0.5}, workers=1, jobs=100, rate_per_s=10.0, batch_exponent=1.0
    )
    assert result.succeeded == 100
    assert result.throughput_jobs_per_s < 1.0
    assert result.wait_s["p95"] > 10


def batches_of(
    model: str, single_s: float, step_share: float, exponent: float
) -> list[MeasuredBatch]:
    scale = {size: size**exponent for size in (1, 2, 4, 8)}
    return [
        MeasuredBatch(model, size, single_s * s, single_s * step_share * s)
        for size, s in scale.items()
        for _ in range(3)
    ]


def test_the_fit_recovers_the_device_that_made_the_batches() -> None:
    measured = batches_of("flux-small", 0.2, 0.75, 0.7) + batches_of("flux-tiny", 0.05, 0.2, 0.7)
    fit = fit_device(measured, {"flux-small": 2, "flux-tiny": 4})
    assert fit.batch_exponent == pytest.approx(0.7)
    assert fit.step_seconds["flux-small"] == pytest.approx(0.2 * 0.75 / 2)
    assert fit.overhead_s["flux-small"] == pytest.approx(0.2 * 0.25)
    assert fit.step_seconds["flux-tiny"] == pytest.approx(0.05 * 0.2 / 4)
    assert fit.overhead_s["flux-tiny"] == pytest.approx(0.05 * 0.8)


def test_one_batch_size_cannot_give_an_exponent() -> None:
    with pytest.raises(ValueError, match="two sizes"):
        fit_device([MeasuredBatch("flux-tiny", 1, 0.1, 0.05)] * 3, {"flux-tiny": 4})


def test_the_trace_starts_at_the_first_arrival(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", [(105.0, "echo"), (100.5, "flux-tiny")], "BATCH")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [
        {"t": 0.0, "model": "flux-tiny", "priority": "BATCH"},
        {"t": 4.5, "model": "echo", "priority": "BATCH"},
    ]


def test_a_replayed_burst_is_one_full_batch(tmp_path: Path) -> None:
    # Four simultaneous arrivals fill flux-tiny's max_batch of 4: dispatched at once, and the
    # batch takes (overhead + steps x step) x 4**exponent = (0.05 + 4 x 0.01) x 2 seconds.
    trace = write_trace(tmp_path / "burst.jsonl", [(0.0, "flux-tiny")] * 4, "STANDARD")
    result = simulate_small_for_validation(
        {"flux-tiny": 0.01},
        workers=1,
        overhead_s={"flux-tiny": 0.05},
        batch_exponent=0.5,
        trace=trace,
        # With the window on an idle device, the four arrivals leave as one batch.
        scheduler=SchedulerSettings(batch_window_when_idle=True),
    )
    assert result.jobs == result.succeeded == 4
    assert result.mean_batch_size == 4
    assert result.wait_s["p95"] == 0
    assert result.latency_s["p50"] == pytest.approx(0.18)
