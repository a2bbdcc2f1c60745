"""Reading a `mediamesh batch` prompts file: line splitting, decoding, errors and value checks."""

from __future__ import annotations

import json

import pytest

from mediamesh.cli.batch_file import BatchFileError, read_batch


def write(tmp_path, data: bytes):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(data)
    return path


def test_separators_unicode_counts_as_line_breaks_stay_inside_their_string(tmp_path):
    # Raw, as json.dumps(ensure_ascii=False) writes them: valid JSON, one line each.
    prompts = ["a\u2028b", "c\u2029d", "e\u0085f", "g\x0ch\x1ci"]
    text = "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts)
    lines = read_batch(write(tmp_path, text.encode()), "echo")
    assert [line.fields["prompt"] for line in lines] == prompts
    assert [line.number for line in lines] == [1, 2, 3, 4]


def test_a_byte_order_mark_and_crlf_line_ends_are_taken(tmp_path):
    data = b'\xef\xbb\xbf{"prompt": "a"}\r\n\r\n{"prompt": "b"}\r\n'
    lines = read_batch(write(tmp_path, data), "echo")
    assert [(line.number, line.fields["prompt"]) for line in lines] == [(1, "a"), (3, "b")]
    plain = read_batch(write(tmp_path, b'{"prompt": "a"}\n'), "echo")
    assert plain[0].key == lines[0].key  # the same request, however the file was saved


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"prompt": "a"}\n{"prompt": "\xc3\xa9\xff"}\n',
            "line 2, column 14: not valid UTF-8 (byte 0xff)",
        ),
        (
            b'{"prompt": "a"}\n\n{"prompt": "b",}\n',
            "line 3, column 16: not valid JSON (Expecting property name",
        ),
        (b'{"prompt": "a"}\n  nope\n', "line 2, column 3: not valid JSON (Expecting value)"),
        (b'{"prompt": "a"}\n\xe2\x80\xa8\n', "line 2, column 1: not valid JSON (Expecting value)"),
    ],
)
def test_decoding_and_json_errors_name_line_and_column(tmp_path, data, message):
    with pytest.raises(BatchFileError) as caught:
        read_batch(write(tmp_path, data), "echo")
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"steps": -3}, "steps: must be a whole number from 0 to 4294967295, got -3"),
        (
            {"steps": 99999999999},
            "steps: must be a whole number from 0 to 4294967295, got 99999999999",
        ),
        ({"seed": -1}, "seed: must be a whole number from 0 to"),
        ({"timeout_ms": -5}, "timeout_ms: must be a whole number from 1 to 4294967295, got -5"),
        ({"guidance_scale": 1e39}, "guidance_scale: must be a number from"),
        ({"steps": 4, "seed": 7}, ""),
    ],
)
def test_a_value_no_request_may_carry_is_its_lines_problem_only(tmp_path, fields, problem):
    text = json.dumps({"prompt": "x", **fields}) + "\n" + json.dumps({"prompt": "y"}) + "\n"
    bad, good = read_batch(write(tmp_path, text.encode()), "echo")
    assert bad.problem.startswith(problem) and bool(bad.problem) == bool(problem)
    assert good.problem == ""


def test_editing_or_appending_a_line_changes_no_other_lines_key(tmp_path):
    before = read_batch(
        write(tmp_path, b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"}\n'), "echo"
    )
    after = read_batch(
        write(tmp_path, b'{"prompt": "a"}\n{"prompt": "B"}\n{"prompt": "c"}\n{"prompt": "d"}\n'),
        "echo",
    )
    assert [x.key == y.key for x, y in zip(before, after, strict=False)] == [True, False, True]
    assert after[3].key.endswith(":4") and after[0].key.startswith("batch:")
    # Field order and spacing are no part of the request.
    same = read_batch(write(tmp_path, b'{ "model":"echo","prompt":"a" }\n'), None)
    assert same[0].key == before[0].key
