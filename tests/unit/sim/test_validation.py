"""The validation hook: a small local mesh from measured step times."""

from __future__ import annotations

from bench.sim.validation import simulate_small_for_validation


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
