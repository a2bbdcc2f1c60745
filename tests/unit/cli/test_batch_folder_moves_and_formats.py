"""A `mediamesh batch` folder carries its batch's run id: moved or copied it resumes with
nothing to redo, another folder of the same prompts is another batch, a folder of an older
mediamesh batch keeps its results; and a line edited to another format replaces its file."""

from __future__ import annotations

import json
import shutil

from mediamesh.cli.batch_file import line_key, read_batch
from mediamesh.cli.batch_manifest import MANIFEST, RUN_FILE

from .batch_fakes import FakeMesh, rows, run_batch, write_lines

LINES = [{"prompt": f"p{i}", "seed": i} for i in range(5)]


def test_a_moved_folder_resumes_with_nothing_to_redo(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh()
    prompts = write_lines(tmp_path / "prompts.jsonl", *LINES)
    first = tmp_path / "first"
    assert run_batch(monkeypatch, mesh, prompts, first) == 0
    assert len(mesh.submits) == 5
    capsys.readouterr()

    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(first, moved)
    assert run_batch(monkeypatch, mesh, prompts, moved) == 0
    out, err = capsys.readouterr()
    assert "changed since their results were written" not in err
    assert out.startswith("0 succeeded, 0 failed, 5 already done")
    assert len(mesh.submits) == 5  # nothing sent again

    copied = tmp_path / "copied"
    shutil.copytree(moved, copied)
    assert run_batch(monkeypatch, mesh, prompts, copied) == 0
    assert "5 already done" in capsys.readouterr().out and len(mesh.submits) == 5


def test_two_folders_of_the_same_prompts_do_not_share_jobs(tmp_path, monkeypatch):
    mesh = FakeMesh()
    prompts = write_lines(tmp_path / "prompts.jsonl", *LINES)
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "a") == 0
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "b") == 0
    assert len(mesh.submits) == 10 and len(set(mesh.submits)) == 10
    run_ids = {json.loads((tmp_path / folder / RUN_FILE).read_text())["run_id"] for folder in "ab"}
    assert len(run_ids) == 2
    # Every row says which run made its key.
    assert {row["run_id"] for row in rows(tmp_path / "a")} == {
        json.loads((tmp_path / "a" / RUN_FILE).read_text())["run_id"]
    }


def test_a_folder_of_an_older_batch_keeps_its_results_and_may_then_move(
    tmp_path, monkeypatch, capsys
):
    prompts = write_lines(tmp_path / "prompts.jsonl", *LINES)
    old = tmp_path / "old"
    old.mkdir()
    # As an older mediamesh batch left it: keys scoped by the folder's path, no run id.
    manifest = []
    for line in read_batch(prompts, "echo"):
        key = line_key(line.number, line.fields, str(old.resolve()))
        (old / f"{line.number}.png").write_bytes(b"png")
        manifest.append(
            {"line": line.number, "key": key, "input": str(prompts.resolve()), "job_id": "j",
             "state": "SUCCEEDED", "file": f"{line.number}.png", "seconds": 0.1}
        )  # fmt: skip
    (old / MANIFEST).write_text("".join(json.dumps(row) + "\n" for row in manifest))
    mesh = FakeMesh()
    assert run_batch(monkeypatch, mesh, prompts, old) == 0
    assert "5 already done" in capsys.readouterr().out and mesh.submits == []
    assert json.loads((old / RUN_FILE).read_text()) == {
        "manifest_version": 2,
        "run_id": str(old.resolve()),
    }
    moved = tmp_path / "moved"
    shutil.move(old, moved)
    assert run_batch(monkeypatch, mesh, prompts, moved) == 0
    assert "5 already done" in capsys.readouterr().out and mesh.submits == []


def test_a_run_file_of_a_newer_batch_is_refused(tmp_path, monkeypatch, capsys):
    prompts = write_lines(tmp_path / "prompts.jsonl", *LINES)
    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_FILE).write_text(json.dumps({"manifest_version": 3, "run_id": "x"}))
    mesh = FakeMesh()
    assert run_batch(monkeypatch, mesh, prompts, out) == 2
    err = capsys.readouterr().err
    assert f"{out / RUN_FILE} has manifest_version 3, written by a newer mediamesh batch" in err
    assert mesh.submits == []


def test_a_line_edited_to_another_format_replaces_its_file(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh()
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a"}, {"prompt": "b"})
    out = tmp_path / "out"
    assert run_batch(monkeypatch, mesh, prompts, out) == 0
    assert sorted(p.name for p in out.glob("[0-9]*")) == ["1.png", "2.png"]
    write_lines(prompts, {"prompt": "a", "output_format": "jpeg"}, {"prompt": "b"})
    capsys.readouterr()
    assert run_batch(monkeypatch, mesh, prompts, out) == 0
    assert "1 line(s) changed since their results were written (line 1)" in (
        capsys.readouterr().err
    )
    assert sorted(p.name for p in out.glob("[0-9]*")) == ["1.jpg", "2.png"]
    assert json.loads((out / "1.jpg").read_bytes())["output_format"] == "jpeg"
