"""The shipped scenarios parse, and bad scenarios fail with the field at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.sim.scenario import ScenarioError, load_scenario, parse_scenario
from mediamesh.sim.simulation import build, scale_fleet, simulate

from .support import BASE, tiny

SCENARIOS = Path(__file__).resolve().parents[3] / "services" / "sim" / "scenarios"


def test_the_small_scenario_runs() -> None:
    result = simulate(load_scenario(SCENARIOS / "small.yaml"), jobs=400)
    assert result.stats["total"]["succeeded"] + result.stats["total"]["rejected"] == 400
    assert set(result.stats["by_modality"]) == {"audio", "image", "video"}


def test_the_thousand_gpu_scenario_has_a_thousand_gpus() -> None:
    scenario = load_scenario(SCENARIOS / "fleet-1000.yaml")
    assert sum(d.replicas for d in scenario.fleet) == 1000
    assert scenario.workload.jobs == 1_000_000
    assert {s.name for s in scenario.registry().models} >= set(scenario.workload.models)


def test_devices_override_keeps_the_fleet_shape() -> None:
    fleet = scale_fleet(load_scenario(SCENARIOS / "fleet-1000.yaml").fleet, 100)
    assert sum(d.replicas for d in fleet) == 100
    assert [d.replicas for d in fleet] == [50, 21, 10, 5, 10, 4]


def test_an_unknown_device_type_is_named() -> None:
    raw = {**BASE, "fleet": [{"name": "x", "device": "tpu", "replicas": 1}]}
    with pytest.raises(ScenarioError, match="unknown device type 'tpu'"):
        parse_scenario(raw)


def test_an_unknown_workload_model_is_named() -> None:
    with pytest.raises(ScenarioError, match="'no-such-model'"):
        tiny(workload={"models": {"no-such-model": 1}})


def test_autoscaling_needs_a_modality() -> None:
    raw = {
        **BASE,
        "fleet": [
            {
                "name": "x",
                "device": "gpu",
                "replicas": 1,
                "autoscale": {"max_replicas": 2, "threshold": 1},
            }
        ],
    }
    with pytest.raises(ScenarioError, match="autoscale needs a modality"):
        parse_scenario(raw)


def test_device_prices_default_to_the_schedulers_and_feed_every_cost() -> None:
    prices = {"on-demand": 3.0, "spot": 1.0}
    scenario = tiny(
        scheduler={"prices_per_device_hour": prices},
        device_types={"gpu": {"price_per_hour": None}},
    )
    assert scenario.prices("gpu") == prices
    simulation = build(scenario, jobs=20)
    assert simulation.engine.core.policy.prices_per_device_hour == prices
    assert simulation.cluster.accounting.prices == {"gpu": prices}


def test_a_device_types_own_prices_win() -> None:
    scenario = tiny(scheduler={"prices_per_device_hour": {"on-demand": 3.0, "spot": 1.0}})
    assert scenario.prices("gpu") == {"on-demand": 2.0, "spot": 0.5}
