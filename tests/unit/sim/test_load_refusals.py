"""A scenario that could never make its jobs, or names what does not exist, is refused at load
naming the field (and, for a trace, the file and line), never hung, crashed or run wrongly."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mediamesh.sim.scenario import ScenarioError, parse_scenario

from .support import BASE


def _refusal(**overrides: object) -> str:
    raw = copy.deepcopy(BASE)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(raw, "s.yaml")
    return str(refused.value)


def test_bursty_arrivals_with_no_rate_at_all_are_refused_naming_both_rates() -> None:
    arrivals = {"process": "bursty", "burst_rate_per_s": 0, "idle_rate_per_s": 0}
    message = _refusal(workload={"arrivals": arrivals})
    assert "workload.arrivals: burst_rate_per_s and idle_rate_per_s are both 0" in message


def test_right_sizing_an_unknown_device_type_is_refused_naming_the_field() -> None:
    message = _refusal(right_size={"devices": ["h100"]})
    assert "right_size.devices: unknown device types ['h100']" in message


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", ".hidden", "x\\y", ""])
def test_a_name_that_is_not_a_plain_file_name_part_is_refused(name: str) -> None:
    assert f"name: {name!r} is not a plain file-name part" in _refusal(name=name)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"flux-tny": {"steps": 40}}, "workload.params.flux-tny: 'flux-tny' is not a model"),
        ({"flux-tiny": {"steps": 0}}, "workload.params.flux-tiny.steps: 0 is out of range"),
        ({"flux-tiny": {"steps": 2.7}}, "workload.params.flux-tiny.steps: 2.7 must be a whole"),
        ({"flux-tiny": {"steps": 1000}}, "flux-tiny.steps: 1000 is out of range; allowed 1..50"),
        ({"flux-tiny": {"width": 100000}}, "flux-tiny.width: 100000 is out of range"),
        ({"stable-audio-tiny": {"width": 64}}, "stable-audio-tiny.width: model"),
        ({"flux-tiny": {"seed": 3}}, "flux-tiny.seed: not a parameter the simulator sets"),
    ],
)
def test_workload_params_are_checked_as_the_mesh_checks_a_request(
    params: dict[str, dict[str, float]], expected: str
) -> None:
    assert expected in _refusal(workload={**BASE["workload"], "params": params})


def test_workload_params_within_the_models_limits_load() -> None:
    workload = {**BASE["workload"], "params": {"flux-tiny": {"steps": 40, "width": 128}}}
    parse_scenario({**copy.deepcopy(BASE), "workload": workload}, "s.yaml")


def _trace_refusal(tmp_path: Path, text: str | None) -> str:
    path = tmp_path / "trace.jsonl"
    if text is not None:
        path.write_text(text)
    workload = {**BASE["workload"], "arrivals": {"process": "trace", "path": "trace.jsonl"}}
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**copy.deepcopy(BASE), "workload": workload}, "s.yaml", base=tmp_path)
    return str(refused.value).replace(str(path), "TRACE")


def _line(**row: object) -> str:
    return json.dumps(row) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "workload.arrivals.path: cannot read TRACE: No such file"),
        ("", "workload.arrivals.path: TRACE has no rows"),
        (_line(t=0, model="flux-tiny") + _line(model="flux-tiny"), "TRACE:2: t: required"),
        (_line(t=0, model="flux-tiny", priority="URGENT"), "TRACE:1: priority: unknown value"),
        ("[1, 2]\n", "TRACE:1: expected a JSON object, not list"),
        (_line(t="NaN", model="flux-tiny"), "TRACE:1: t: 'NaN' is not a time"),
        ('{"t": NaN, "model": "flux-tiny"}\n', "TRACE:1: not JSON: NaN is not a JSON number"),
        (_line(t=-1, model="flux-tiny"), "TRACE:1: t: -1 is not a time"),
        (_line(t=0), "TRACE:1: model: required"),
        ("\n" + _line(t=0, model="nope"), "TRACE:2: model: 'nope' is not in the registry"),
        (_line(t=0, model="wan-tiny"), "models of TRACE ['wan-tiny'] cannot run"),
    ],
)
def test_a_trace_is_checked_at_load_naming_file_line_and_field(
    tmp_path: Path, text: str | None, expected: str
) -> None:
    assert expected in _trace_refusal(tmp_path, text)


def test_a_trace_model_may_take_workload_params(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text(_line(t=0, model="echo"))
    arrivals = {"process": "trace", "path": "trace.jsonl"}
    gpu = copy.deepcopy(BASE["device_types"]["gpu"])
    gpu["step_s_per_unit"]["echo"] = 0.1
    raw = {
        **copy.deepcopy(BASE),
        "device_types": {"gpu": gpu},
        "workload": {**BASE["workload"], "arrivals": arrivals, "params": {"echo": {"steps": 2}}},
    }
    parse_scenario(raw, "s.yaml", base=tmp_path)
