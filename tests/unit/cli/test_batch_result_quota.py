"""`mediamesh batch --delete-results` at the tenant's result quota: a refusal its own jobs
caused is waited out while they are deleted, one held by others stops the run; a stop lets
the recording and deleting under way finish, and a re-run deletes what an earlier run left."""

from __future__ import annotations

import time

import pytest

from mediamesh.sdk import GatewayError

from .batch_fakes import FakeMesh, rows, run_batch, write_lines

# Each line's result is some 60 bytes in the fake: the quota holds about 8 of them.
QUOTA = 500


def many_lines(path, count: int):
    return write_lines(
        path, *({"prompt": f"M {i}", "seed": i, "width": 64, "height": 64} for i in range(count))
    )


@pytest.mark.parametrize(("count", "concurrency"), [(300, 64), (1100, 1024)])
def test_a_run_filling_the_quota_with_its_own_results_waits_for_their_deletion(
    tmp_path, monkeypatch, capsys, count, concurrency
):
    mesh = FakeMesh(
        delays={f"M {i}": 0.001 * (i % 7) for i in range(count)}, result_quota_bytes=QUOTA
    )
    prompts, out = many_lines(tmp_path / "prompts.jsonl", count), tmp_path / "out"
    flags = ("--delete-results", "--concurrency", str(concurrency))

    code = run_batch(monkeypatch, mesh, prompts, out, *flags)

    assert code == 0, capsys.readouterr().err
    recorded = rows(out)
    assert sorted(row["line"] for row in recorded) == list(range(1, count + 1))
    assert {row["state"] for row in recorded} == {"SUCCEEDED"}
    assert sorted(mesh.deleted) == sorted(row["job_id"] for row in recorded)
    assert mesh.held == {}
    summary = capsys.readouterr().out
    assert f"{count} succeeded, 0 failed, 0 already done; {count} deleted" in summary


def test_a_quota_held_by_others_stops_the_run_at_once(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh(result_quota_bytes=QUOTA)
    mesh.held["someone else's"] = QUOTA
    prompts, out = many_lines(tmp_path / "prompts.jsonl", 40), tmp_path / "out"
    started = time.monotonic()

    code = run_batch(monkeypatch, mesh, prompts, out, "--delete-results")

    assert code == 2 and time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.startswith("mediamesh batch: RESOURCE_EXHAUSTED: result_quota_bytes: tenant")
    assert rows(out) == [] and mesh.jobs == {}


def test_a_stop_lets_the_deletions_under_way_finish(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh(
        lambda prompt, attempt: (
            GatewayError("UNAUTHENTICATED", "api key revoked") if prompt == "bad" else None
        ),
        delays={"quick": 0.05},
    )
    mesh.delete_delays = {"a": 0.5}  # still deleting when line 3 stops the run
    prompts = write_lines(
        tmp_path / "prompts.jsonl", {"prompt": "a"}, {"prompt": "quick"}, {"prompt": "bad"}
    )
    out = tmp_path / "out"

    code = run_batch(monkeypatch, mesh, prompts, out, "--delete-results", "--concurrency", "2")

    assert code == 2 and "UNAUTHENTICATED: api key revoked" in capsys.readouterr().err
    recorded = {row["line"]: row["job_id"] for row in rows(out)}
    assert sorted(recorded) == [1, 2]
    assert sorted(mesh.deleted) == sorted(recorded.values())


def test_a_rerun_deletes_the_jobs_of_rows_an_earlier_run_did_not(tmp_path, monkeypatch, capsys):
    # Run without the flag, the folder's own recorded jobs hold the quota: the run stops.
    mesh = FakeMesh(result_quota_bytes=QUOTA)
    prompts, out = many_lines(tmp_path / "prompts.jsonl", 30), tmp_path / "out"
    assert run_batch(monkeypatch, mesh, prompts, out, "--concurrency", "1") == 2
    first = [row["job_id"] for row in rows(out)]
    assert 0 < len(first) < 30 and mesh.deleted == []
    capsys.readouterr()

    # With it, a re-run deletes those first, then runs the rest within the quota.
    code = run_batch(monkeypatch, mesh, prompts, out, "--delete-results", "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert mesh.deleted[: len(first)] == first
    assert sorted(mesh.deleted) == sorted(row["job_id"] for row in rows(out))
    assert mesh.held == {}
    summary = capsys.readouterr().out
    assert f"{30 - len(first)} succeeded, 0 failed, {len(first)} already done; 30 deleted" in (
        summary
    )

    # Deleted ones are not asked for again.
    mesh.deleted.clear()
    assert run_batch(monkeypatch, mesh, prompts, out, "--delete-results") == 0
    assert mesh.deleted == []


def test_a_rerun_with_every_line_done_still_deletes_what_was_left(tmp_path, monkeypatch, capsys):
    """A folder whose lines are all done, run first without the flag: a re-run with it has
    nothing to run and must still delete the jobs its rows recorded."""
    mesh = FakeMesh()
    prompts, out = many_lines(tmp_path / "prompts.jsonl", 5), tmp_path / "out"
    assert run_batch(monkeypatch, mesh, prompts, out) == 0
    recorded = [row["job_id"] for row in rows(out)]
    assert len(recorded) == 5 and mesh.deleted == []
    capsys.readouterr()
    assert run_batch(monkeypatch, mesh, prompts, out, "--delete-results") == 0
    assert sorted(mesh.deleted) == sorted(recorded)
    assert "5 already done; 5 deleted" in capsys.readouterr().out
