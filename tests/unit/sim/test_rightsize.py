"""Right-sizing finds the cheapest fleet that meets the SLA target, and no smaller one does."""

from __future__ import annotations

from mediamesh.sim.rightsize import right_size

from .support import tiny


def test_right_size_picks_the_cheapest_fleet_meeting_the_target() -> None:
    scenario = tiny(
        right_size={"target": 0.95, "spot_shares": [0.0, 0.5], "window_s": 60},
        spot={"preemptions_per_device_hour": 0.0},
    )
    result = right_size(scenario)
    best = result.best
    assert best is not None and best.meets
    assert min(best.attainment.values()) >= 0.95
    assert best.cost_per_hour == min(t.cost_per_hour for t in result.frontier)
    same_shape = [
        t for t in result.trials if t.device == best.device and t.spot_share == best.spot_share
    ]
    smaller = [t for t in same_shape if t.devices < best.devices]
    assert smaller and not any(t.meets for t in smaller), "a smaller fleet also met the target"
    assert sorted(t.spot_share for t in result.frontier) == [0.0, 0.5]
    assert result.to_dict()["best"]["devices"] == best.devices


def test_a_device_too_slow_for_the_sla_is_skipped_with_the_reason() -> None:
    scenario = tiny(
        device_types={
            "slow": {
                "price_per_hour": {"on-demand": 0.1, "spot": 0.05},
                "step_s_per_unit": {"flux-tiny": 900.0, "flux-small": 8.0,
                                    "stable-audio-tiny": 0.1},
            }
        },
        right_size={"target": 0.95, "spot_shares": [0.5], "window_s": 40},
    )  # fmt: skip
    result = right_size(scenario)
    assert "flux-tiny" in result.skipped["slow"]
    assert result.best is not None and result.best.device == "gpu"
