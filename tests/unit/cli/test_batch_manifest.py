"""What the manifest of a `mediamesh batch` folder says: done lines, retry keys, whose it is."""

from __future__ import annotations

import json

from mediamesh.cli.batch_file import read_batch
from mediamesh.cli.batch_manifest import MANIFEST, UNKNOWN_INPUT, History


def lines_of(tmp_path, *prompts: str, name: str = "prompts.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return str(path), read_batch(path, "echo")


def write_rows(out, *rows: dict, tail: str = "") -> None:
    out.mkdir(exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows) + tail
    (out / MANIFEST).write_text(text)


def row(line, key, state, source, file=None) -> dict:
    return {"line": line.number, "key": key, "state": state, "file": file, "input": source}


def test_a_line_is_retried_under_a_key_no_ended_attempt_used(tmp_path):
    source, (first, second) = lines_of(tmp_path, "a", "b")
    out = tmp_path / "out"
    write_rows(
        out,
        row(first, first.key, "FAILED", source),
        row(first, f"{first.key}:retry1", "EXPIRED", source),
        row(second, second.key, "CANCELLED", source),
        tail='{"line": 2, "key": "cut sh',  # the row being written when a run was killed
    )
    history = History.read(out)
    assert history.attempt_key(first) == f"{first.key}:retry2"
    assert history.attempt_key(second) == f"{second.key}:retry1"
    assert not history.is_done(first) and not history.is_done(second)


def test_a_line_is_done_when_its_numbers_latest_result_is_its_own_and_still_there(tmp_path):
    source, (first, second, third) = lines_of(tmp_path, "a", "b", "c")
    out = tmp_path / "out"
    write_rows(
        out,
        row(first, first.key, "SUCCEEDED", source, "1.png"),
        row(second, second.key, "SUCCEEDED", source, "2.png"),
        # Line 1 of other content since: DIR/1.png is no longer line 1's result.
        row(first, "batch:0123456789abcdef:1", "SUCCEEDED", source, "1.png"),
        row(third, third.key, "SUCCEEDED", source, "3.png"),  # but 3.png is gone
    )
    for name in ("1.png", "2.png"):
        (out / name).write_bytes(b"png")
    history = History.read(out)
    assert [history.is_done(line) for line in (first, second, third)] == [False, True, False]
    assert history.attempt_key(first) == first.key  # no attempt of it failed
    assert history.replaced([first, second, third]) == [1]


def test_a_folder_belongs_to_its_input_file_or_to_whoever_shares_its_lines(tmp_path):
    source, lines = lines_of(tmp_path, "a", "b")
    out = tmp_path / "out"
    assert History.read(out).other_input(source, lines) is None  # no manifest yet
    write_rows(out, row(lines[0], lines[0].key, "SUCCEEDED", source, "1.png"))
    history = History.read(out)
    _, edited = lines_of(tmp_path, "A", "B", name="prompts.jsonl")
    assert history.other_input(source, edited) is None  # the same file, every line edited
    copy, copied = lines_of(tmp_path, "a", "b", "c", name="copy.jsonl")
    assert history.other_input(copy, copied) is None  # a copy of its lines
    other, others = lines_of(tmp_path, "x", "y", name="other.jsonl")
    assert history.other_input(other, others) == source
    # Rows from before the manifest named inputs are no other file's to continue.
    write_rows(out, {"line": 1, "key": "batch:0123:1", "state": "SUCCEEDED", "file": "1.png"})
    assert History.read(out).other_input(source, lines) == UNKNOWN_INPUT
