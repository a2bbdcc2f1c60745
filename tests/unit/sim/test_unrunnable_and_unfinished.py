"""Scenarios whose jobs could never run are refused at load, bad flags in argparse, and a
run that ends with jobs still queued says so: infinite percentiles and exit 1."""

from __future__ import annotations

import copy
import json
import math
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from mediamesh.sim.records import _percentiles
from mediamesh.sim.scenario import ScenarioError, parse_scenario

from .support import BASE
from .test_cli import parse


def _refusal(**overrides: object) -> str:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**copy.deepcopy(BASE), **overrides}, "s.yaml")
    return str(refused.value)


def test_a_workload_model_no_device_has_a_speed_for_is_refused() -> None:
    gpu = copy.deepcopy(BASE["device_types"]["gpu"])
    del gpu["step_s_per_unit"]["flux-small"]
    message = _refusal(device_types={"gpu": gpu})
    assert "workload.models ['flux-small'] cannot run" in message
    assert "step_s_per_unit" in message


def test_a_model_only_a_deployment_of_another_modality_could_run_is_refused() -> None:
    fleet = [{"name": "images", "device": "gpu", "modality": "image", "replicas": 2}]
    assert "['stable-audio-tiny'] cannot run" in _refusal(fleet=fleet)


def test_a_model_only_a_deployment_without_replicas_or_autoscale_hosts_is_refused() -> None:
    fleet = [{"name": "od", "device": "gpu", "replicas": 0}]
    assert "cannot run" in _refusal(fleet=fleet)


def test_an_empty_fleet_is_refused_naming_the_field() -> None:
    assert _refusal(fleet=[]) == "s.yaml: fleet: needs at least one deployment"


def test_min_replicas_above_max_replicas_is_refused_naming_both() -> None:
    autoscale = {"min_replicas": 20, "max_replicas": 12, "threshold": 5}
    fleet = [{"name": "od", "device": "gpu", "modality": "image", "replicas": 1,
              "autoscale": autoscale}]  # fmt: skip
    assert _refusal(fleet=fleet) == (
        "s.yaml: fleet.0: deployment 'od': autoscale.min_replicas (20) must be at most "
        "autoscale.max_replicas (12)"
    )


@pytest.mark.parametrize(
    ("flag", "value", "limit"),
    [
        ("--jobs", "0", "must be at least 1, not 0"),
        ("--jobs", "-5", "must be at least 1, not -5"),
        ("--devices", "0", "must be at least 1, not 0"),
        ("--dispatch-interval-s", "-1", "must be at least 0, not -1"),
        ("--window-s", "0", "must be greater than 0, not 0"),
        ("--sla-target", "1.5", "must be at most 1 (a fraction of jobs), not 1.5"),
    ],
)
def test_out_of_range_flags_are_refused_naming_flag_and_limit(
    flag: str, value: str, limit: str, capsys
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["small", flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}: {limit}" in capsys.readouterr().err


def test_devices_too_few_for_every_model_are_refused_before_the_run(tmp_path, capsys) -> None:
    fleet = [
        {"name": "images", "device": "gpu", "modality": "image", "replicas": 3},
        {"name": "audio", "device": "gpu", "modality": "audio", "replicas": 1},
    ]
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**BASE, "fleet": fleet}))
    args = parse([str(path), "--devices", "1", "--no-plot", "--out", str(tmp_path)])
    assert args.handler(args) == 2
    assert "--devices 1: workload.models ['stable-audio-tiny'] cannot run" in (
        capsys.readouterr().err
    )


def test_percentiles_that_reach_jobs_that_never_ended_are_infinite() -> None:
    import numpy as np

    values = np.array([1.0, 2.0, 3.0, 4.0, np.inf])
    assert _percentiles(values) == {"p50": 3.0, "p95": math.inf, "p99": math.inf}
    # Where all are finite, numpy's own interpolation is kept.
    assert _percentiles(np.array([1.0, 2.0]))["p50"] == 1.5


def test_jobs_left_queued_count_as_infinite_and_exit_1(tmp_path: Path, capsys) -> None:
    # One slow device, a burst of work and no time to drain it: jobs are left queued.
    fleet = [{"name": "od", "device": "gpu", "pool": "on-demand", "replicas": 1}]
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**BASE, "fleet": fleet, "drain_s": 1.0}))
    args = parse([str(path), "--jobs", "200", "--no-plot", "--out", str(tmp_path)])
    assert args.handler(args) == 1
    out, err = capsys.readouterr()
    assert "jobs unfinished (" in err and "(drain_s)" in err
    assert "/inf" in out
    data = json.loads((tmp_path / "sim-tiny.json").read_text())
    unfinished = [s for s in data["by_modality"].values() if s["unfinished"]]
    assert unfinished and all(s["wait_s"]["p99"] is None for s in unfinished)
    assert data["total"]["unfinished"] > 0


def test_a_run_that_drains_every_job_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(BASE))
    args = parse([str(path), "--jobs", "200", "--no-plot", "--out", str(tmp_path)])
    assert args.handler(args) == 0


@pytest.mark.parametrize("name", ["small", "fleet-1000"])
def test_shipped_scenarios_show_commands_that_run(name: str) -> None:
    text = (files("mediamesh.sim") / "scenarios" / f"{name}.yaml").read_text()
    commands = [line for line in text.splitlines() if "mediamesh simulate" in line]
    assert commands
    assert all(f"mediamesh simulate {name}" in line for line in commands)
