"""`mediamesh generate --quiet` (and `watch --quiet`) print only the outcome: the result's
path, or the error; no progress bar and no notices such as `dispatched: ...`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.following import JobOnTerminal
from mediamesh.sdk import Event, Notice, Progress, Queued, Result
from mediamesh.sdk.types import JobState


def _events() -> list[Event]:
    return [
        Queued(job_id="j1", state=JobState.QUEUED, position=0, eta_s=1.0, queue="STANDARD"),
        Notice(
            job_id="j1",
            state=JobState.DISPATCHED,
            kind="dispatched",
            message="dispatched to w-img (attempt 1)",
            worker_id="w-img",
            attempt=1,
        ),
        Progress(job_id="j1", state=JobState.RUNNING, step=1, total_steps=1, attempt=1),
        Result(job_id="j1", state=JobState.SUCCEEDED, data=b"png", mime_type="image/png", seed=3),
    ]


def _run(quiet: bool, out: Path) -> int:
    terminal = JobOnTerminal(quiet, None, None)
    terminal.follow(_events())
    terminal.close()
    return terminal.report(out, previews_asked=False)


def test_quiet_prints_only_the_result_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(True, tmp_path / "fox.png") == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == f"{tmp_path / 'fox.png'}\n"


def test_without_quiet_the_notice_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(False, tmp_path / "fox.png") == 0
    captured = capsys.readouterr()
    assert "dispatched: dispatched to w-img (attempt 1)" in captured.err + captured.out
