"""A speed smoke test: it runs a real volume and reports, asserting nothing about time."""

from __future__ import annotations

from mediamesh.sim.simulation import simulate

from .support import tiny


def test_twenty_thousand_jobs_on_twenty_devices() -> None:
    scenario = tiny(workload={"jobs": 20_000, "arrivals": {"rate_per_s": 40}})
    result = simulate(scenario, devices=20)
    assert result.devices == 20
    assert result.stats["total"]["succeeded"] == 20_000
    print(f"simulated {result.jobs:,} jobs at {result.jobs_per_wall_s:,.0f} jobs/s")
    assert result.jobs_per_wall_s > 0
