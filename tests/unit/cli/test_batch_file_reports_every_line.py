"""A prompts file that cannot run is refused naming every line at fault, each with its
fields and what they take; a whole number written as 4.0 is taken as 4."""

from __future__ import annotations

import json

import pytest

from mediamesh.cli.batch_file import MAX_REPORTED, BatchFileError, read_batch

from .batch_fakes import FakeMesh, run_batch


def write(tmp_path, *lines: str):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def refusal(tmp_path, *lines: str) -> list[str]:
    with pytest.raises(BatchFileError) as caught:
        read_batch(write(tmp_path, *lines), "echo")
    return str(caught.value).splitlines()


def test_every_line_at_fault_is_named_with_its_fields(tmp_path):
    assert refusal(
        tmp_path,
        '{"prompt": "fine"}',
        '{"prompt": "a", "guidance_scale": true}',
        "not json",
        '{"prompt": "b", "steps": "4", "stepz": 1}',
        '{"prompt": "c", "steps": 4.5, "seed": null}',
        '{"prompt": 3, "priority": 1}',
        '{"steps": 2, "model": ""}',
    ) == [
        "line 2: guidance_scale must be a number, not true",
        "line 3, column 1: not valid JSON (Expecting value)",
        'line 4: steps must be int, a whole number, not the string "4"; '
        "unknown field 'stepz'; allowed: prompt, negative_prompt, model, steps, seed, width, "
        "height, num_frames, duration_s, guidance_scale, output_format, output_quality, fps, "
        "priority, timeout_ms",
        "line 5: steps must be int, a whole number, not 4.5; seed must be int, a whole number, "
        "not null",
        "line 6: prompt must be a string, not 3; priority must be a string, not 1",
        'line 7: prompt is required; no model; add "model" or pass --model',
    ]


def test_past_the_cap_the_rest_are_counted(tmp_path):
    faults = refusal(tmp_path, *(['{"prompt": "x", "seed": "1"}'] * (MAX_REPORTED + 7)))
    assert len(faults) == MAX_REPORTED + 1
    assert faults[0] == 'line 1: seed must be int, a whole number, not the string "1"'
    assert faults[-1] == "and 7 more lines at fault"


def test_a_whole_number_with_a_zero_fraction_is_that_number(tmp_path):
    as_float, as_int = read_batch(
        write(tmp_path, '{"prompt": "x", "steps": 4.0, "seed": 7.0}', '{"prompt": "x"}'), "echo"
    )
    assert as_float.fields["steps"] == 4 and type(as_float.fields["steps"]) is int
    plain = read_batch(write(tmp_path, '{"prompt": "x", "steps": 4, "seed": 7}'), "echo")[0]
    assert as_float.key == plain.key  # the same request, however the number was written
    assert as_float.problem == "" and as_int.problem == ""
    # Beyond what a float holds exactly, the number read may not be the one written.
    (fault,) = refusal(tmp_path, json.dumps({"prompt": "x", "seed": 2.0**60}))
    assert fault.startswith("line 1: seed must be int, a whole number: 1.152921504606847e+18 is")


def test_the_command_prints_each_fault_on_its_own_line(tmp_path, monkeypatch, capsys):
    prompts = write(tmp_path, '{"prompt": "a", "steps": "4"}', '{"prompt": "b", "fps": 1.5}')
    mesh = FakeMesh()
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "out") == 2
    assert capsys.readouterr().err.splitlines() == [
        'mediamesh batch: line 1: steps must be int, a whole number, not the string "4"',
        "mediamesh batch: line 2: fps must be int, a whole number, not 1.5",
    ]
    assert mesh.submits == [] and not (tmp_path / "out").exists()
