"""The retention sweep of the checkpoints folder takes half-written `.partial` files too:
a worker lost mid-write leaves one, and the job's end looks for none when its one attempt
reported no checkpoint."""

from __future__ import annotations

from pathlib import Path

from mediamesh.scheduler.checkpoints import CheckpointFiles


def test_the_sweep_takes_half_written_files_no_job_owns(tmp_path: Path) -> None:
    # A worker lost mid-write leaves "<job>-stepN.partial"; the job's one attempt reported
    # no checkpoint, so its end looks for none: the retention sweep is what removes it.
    partial = tmp_path / "j-step3.partial"
    whole = tmp_path / "k-step2.pt"
    owned = tmp_path / "live-step2.pt"
    for path in (partial, whole, owned):
        path.write_bytes(b"x")
    files = CheckpointFiles(tmp_path)
    files.sweep({str(owned)}, older_than=0)  # nothing is that old: all stays
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "j-step3.partial",
        "k-step2.pt",
        "live-step2.pt",
    ]
    files.sweep({str(owned)}, older_than=9e9)
    assert [p.name for p in tmp_path.iterdir()] == ["live-step2.pt"]
