"""What a run reports: every pool priced (a device type that prices one pool keeps the
scheduler's price for the other, as the mesh's config does), the devices it started with,
right-sizing's reasons for the device types it skipped, and a JSON with no NaN in it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from mediamesh.sim.report import write_json
from mediamesh.sim.rightsize import right_size
from mediamesh.sim.scenario import Scenario, ScenarioError, parse_scenario
from mediamesh.sim.simulation import build, simulate

from .support import BASE, tiny
from .test_cli import parse


def _on_demand_priced_only(**overrides: object) -> Scenario:
    """The tiny scenario with its GPU priced in the on-demand pool alone."""
    raw = copy.deepcopy(BASE)
    raw["device_types"]["gpu"]["price_per_hour"] = {"on-demand": 4.0}
    raw["scheduler"]["prices_per_device_hour"] = {"on-demand": 3.0, "spot": 1.0}
    return parse_scenario({**raw, **overrides}, "s.yaml")


def test_a_pool_a_device_type_does_not_price_keeps_the_schedulers_price() -> None:
    scenario = _on_demand_priced_only()
    assert scenario.prices("gpu") == {"on-demand": 4.0, "spot": 1.0}
    result = simulate(scenario, jobs=200)
    spot = next(r for r in result.fleet["by_pool_device"] if r["pool"] == "spot")
    assert spot["cost"] == pytest.approx(spot["device_hours"] * 1.0)
    assert result.fleet["on_demand_cost"] > result.fleet["cost"]


def test_right_sizing_prices_an_unpriced_spot_pool_at_the_schedulers_price() -> None:
    scenario = _on_demand_priced_only(
        right_size={"target": 0.9, "spot_shares": [0.5], "window_s": 30}
    )
    trial = right_size(scenario).frontier[0]
    assert trial.spot > 0
    assert trial.cost_per_hour == 4.0 * trial.on_demand + 1.0 * trial.spot


@pytest.mark.parametrize("price", [-1.0, math.nan, math.inf])
def test_a_price_that_is_not_one_is_refused_naming_device_and_pool(price: float) -> None:
    with pytest.raises(ScenarioError, match=r"device_types\.gpu\.price_per_hour\.spot"):
        tiny(device_types={"gpu": {"price_per_hour": {"on-demand": 1.0, "spot": price}}})


def test_initial_devices_are_the_replicas_at_the_start_not_where_autoscaling_ended() -> None:
    scenario = tiny(
        fleet=[
            {"name": "images", "device": "gpu", "pool": "on-demand", "modality": "image",
             "replicas": 1,
             "autoscale": {"min_replicas": 1, "max_replicas": 8, "threshold": 1,
                           "polling_s": 5, "cooldown_s": 100000}},
            {"name": "audio", "device": "gpu", "pool": "on-demand", "modality": "audio",
             "replicas": 1},
        ],
    )  # fmt: skip
    simulation = build(scenario, jobs=300)
    result = simulation.run()
    assert sum(s.target for s in simulation.states) > 2, "the autoscaler should have grown"
    assert result.devices == 2


def test_right_sizing_lists_a_device_type_without_a_speed_for_a_model_as_skipped() -> None:
    scenario = tiny(
        device_types={
            "imageonly": {
                "price_per_hour": {"on-demand": 0.1, "spot": 0.05},
                "step_s_per_unit": {"flux-tiny": 20.0, "flux-small": 8.0},
            }
        },
        right_size={"target": 0.9, "spot_shares": [0.0], "window_s": 30},
    )
    result = right_size(scenario)
    assert result.skipped["imageonly"] == (
        "no speed for stable-audio-tiny (device_types.imageonly.step_s_per_unit)"
    )
    assert result.best is not None and result.best.device == "gpu"


def test_the_json_never_holds_nan(tmp_path: Path) -> None:
    result = simulate(tiny(), jobs=50)
    result.fleet["cost"] = math.nan
    path = tmp_path / "r.json"
    write_json(result, path)
    assert json.loads(path.read_text(), parse_constant=pytest.fail)["fleet"]["cost"] is None


def test_a_dotted_name_keeps_its_dots_in_the_result_file_names(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "name": "fleet-v1.5x"}))
    args = parse([str(path), "--jobs", "50", "--out", str(tmp_path / "out")])
    assert args.handler(args) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "sim-fleet-v1.5x.json",
        "sim-fleet-v1.5x.png",
    ]
