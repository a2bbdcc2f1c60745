"""A line of `mediamesh batch` edited since its result was written runs again, and the file
of its old content goes whatever the new outcome: a folder shows no result of content that
made none."""

from __future__ import annotations

import json

from mediamesh.sdk import GatewayError

from .batch_fakes import FakeMesh, rows, run_batch, write_lines


def refuse_the_mesh_refused(prompt: str, attempt: int) -> GatewayError | None:
    return GatewayError("INVALID_ARGUMENT", "steps: at most 8") if prompt == "refused" else None


def test_an_edited_line_that_gets_no_result_loses_its_old_file(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh(refuse_the_mesh_refused)
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_lines(prompts, {"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}, {"prompt": "d"})
    assert run_batch(monkeypatch, mesh, prompts, out) == 0
    capsys.readouterr()

    # Line 2 now fails the checks before sending, line 3 is refused by the mesh, line 4
    # fails on it: none makes a result, and each one's file of the old prompt goes.
    write_lines(
        prompts,
        {"prompt": "a"},
        {"prompt": "A 19", "seed": -5},
        {"prompt": "refused"},
        {"prompt": "fail now"},
    )
    assert run_batch(monkeypatch, mesh, prompts, out) == 1
    err = capsys.readouterr().err
    assert "3 line(s) changed since their results were written (line 2, 3, 4)" in err
    assert "each one's earlier result is replaced, or removed if it now gets none" in err
    assert sorted(path.name for path in out.glob("*.png")) == ["1.png"]
    rerun = sorted((row["line"], row["state"]) for row in rows(out)[4:])
    assert rerun == [(2, "REJECTED"), (3, "REJECTED"), (4, "FAILED")]

    # Nothing of theirs is left to replace: a re-run retries them without saying so.
    assert run_batch(monkeypatch, mesh, prompts, out) == 1
    assert "changed since" not in capsys.readouterr().err
    assert sorted(path.name for path in out.glob("*.png")) == ["1.png"]


def test_a_failed_retry_of_unedited_content_touches_no_file(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh()
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_lines(prompts, {"prompt": "a"}, {"prompt": "fail always"})
    assert run_batch(monkeypatch, mesh, prompts, out) == 1
    assert sorted(path.name for path in out.glob("*.png")) == ["1.png"]
    assert run_batch(monkeypatch, mesh, prompts, out) == 1  # fails again, under retry1
    assert sorted(path.name for path in out.glob("*.png")) == ["1.png"]


def test_a_result_sent_as_a_url_is_downloaded_into_the_folder(tmp_path, monkeypatch):
    """An S3 store sends a URL instead of the bytes of a result above the inline limit; the
    folder got an empty file recorded as SUCCEEDED (and --delete-results then deleted the
    only copy)."""
    mesh = FakeMesh(signs_urls=True)
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a fox"})
    out = tmp_path / "out"
    assert run_batch(monkeypatch, mesh, prompts, out, "--delete-results") == 0
    (row,) = rows(out)
    assert row["state"] == "SUCCEEDED"
    written = (out / row["file"]).read_bytes()
    assert json.loads(written)["prompt"] == "a fox"
