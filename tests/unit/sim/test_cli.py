"""`mediamesh simulate` as a subcommand: arguments, outputs and errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from mediamesh.cli.simulate_command import add_simulate_command

from .support import BASE


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mediamesh")
    add_simulate_command(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["simulate", *argv])


def scenario_file(tmp_path: Path, **overrides: object) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**BASE, **overrides}))
    return path


def test_simulate_writes_json_and_png(tmp_path: Path, capsys) -> None:
    args = parse(
        [str(scenario_file(tmp_path)), "--jobs", "300", "--seed", "4", "--out", str(tmp_path)]
    )
    assert args.handler(args) == 0
    data = json.loads((tmp_path / "sim-tiny.json").read_text())
    assert data["jobs"] == 300 and data["seed"] == 4
    assert {"by_modality", "by_modality_priority", "fleet", "over_time"} <= set(data)
    assert data["fleet"]["on_demand_cost"] >= data["fleet"]["cost"] > 0
    assert (tmp_path / "sim-tiny.png").read_bytes()[:4] == b"\x89PNG"
    assert "jobs/s" in capsys.readouterr().out


def test_right_size_writes_its_answer(tmp_path: Path, capsys) -> None:
    path = scenario_file(tmp_path, right_size={"spot_shares": [0.5], "window_s": 40})
    args = parse([str(path), "--right-size", "--sla-target", "0.9", "--out", str(tmp_path)])
    assert args.handler(args) == 0
    data = json.loads((tmp_path / "sim-tiny-right-size.json").read_text())
    assert data["best"]["meets"] and data["target"] == 0.9
    assert "cheapest fleet" in capsys.readouterr().out


def test_a_bad_scenario_exits_2_with_the_reason(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, "startup_s": -1}))
    args = parse([str(path), "--out", str(tmp_path)])
    assert args.handler(args) == 2
    assert "startup_s" in capsys.readouterr().err


def test_without_the_sim_extra_the_plot_fails_first_with_one_line(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    # A None entry in sys.modules makes `import matplotlib` raise ImportError, as when the
    # `sim` extra is not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = parse([str(scenario_file(tmp_path)), "--jobs", "50", "--out", str(tmp_path)])
    assert args.handler(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "mediamesh simulate: plots need matplotlib: pip install 'mediamesh[sim]' "
        "(or pass --no-plot)\n"
    )
    assert not (tmp_path / "sim-tiny.json").exists(), "the run should not start"
    args = parse(
        [str(scenario_file(tmp_path)), "--jobs", "50", "--out", str(tmp_path), "--no-plot"]
    )
    assert args.handler(args) == 0


def test_an_out_that_cannot_be_a_folder_exits_2_before_the_run(tmp_path: Path, capsys) -> None:
    taken = tmp_path / "results.yaml"
    taken.write_text("")
    args = parse([str(scenario_file(tmp_path)), "--no-plot", "--out", str(taken)])
    assert args.handler(args) == 2
    assert capsys.readouterr().err.startswith(f"mediamesh simulate: --out: cannot create {taken}")


def test_a_negative_seed_is_refused_naming_the_flag(capsys) -> None:
    try:
        parse(["small", "--seed", "-1"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "argument --seed: must be at least 0, not -1" in capsys.readouterr().err
