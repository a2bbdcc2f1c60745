"""`mediamesh batch --delete-results`: each job that ran is deleted from the mesh once its
outcome is in the folder and the manifest, so a long run stays within the tenant's result
quota; one already gone counts as deleted, one the mesh keeps is said in the summary."""

from __future__ import annotations

from mediamesh.sdk import GatewayError

from .batch_fakes import FakeMesh, rows, run_batch, write_lines


def test_each_job_that_ran_is_deleted_after_its_row_is_written(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh(
        lambda prompt, attempt: (
            GatewayError("INVALID_ARGUMENT", "steps: at most 8") if prompt == "refused" else None
        )
    )
    prompts = write_lines(
        tmp_path / "prompts.jsonl",
        {"prompt": "a"},
        {"prompt": "fail here"},
        {"prompt": "refused"},
        {"prompt": "b"},
    )
    out = tmp_path / "out"

    assert run_batch(monkeypatch, mesh, prompts, out, "--delete-results") == 1

    by_line = {row["line"]: row for row in rows(out)}
    # Every job made is deleted once, the failed one too; the refused line made none.
    assert sorted(mesh.deleted) == sorted(by_line[n]["job_id"] for n in (1, 2, 4))
    assert (out / "1.png").is_file() and (out / "4.png").is_file()
    summary = capsys.readouterr().out
    assert "2 succeeded, 2 failed, 0 already done; 3 deleted from the mesh; manifest" in summary

    # A re-run runs the failed line again, under a key of its own, and deletes that job
    # alone: the results already in the folder are not asked for again.
    mesh.deleted.clear()
    run_batch(monkeypatch, mesh, prompts, out, "--delete-results")
    assert mesh.deleted == [f"job-{by_line[2]['key']}:retry1"]


def test_a_job_gone_already_counts_as_deleted_and_one_kept_is_said(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh()
    mesh.delete_refusals = {
        "a": GatewayError("NOT_FOUND", "job_id: no job"),
        "b": GatewayError("PERMISSION_DENIED", "the key may not do that"),
    }
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a"}, {"prompt": "b"})

    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "out", "--delete-results") == 0

    summary = capsys.readouterr().out
    assert (
        "1 deleted from the mesh, 1 not, to go at its retention "
        "(the last: PERMISSION_DENIED: the key may not do that)" in summary
    )
    assert mesh.deleted == []


def test_without_the_flag_nothing_is_deleted(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh()
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a"})
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "out") == 0
    assert mesh.deleted == []
    assert "deleted" not in capsys.readouterr().out
