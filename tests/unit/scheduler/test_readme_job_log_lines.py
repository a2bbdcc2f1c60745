"""README's Logs paragraph names the scheduler's job lines as they are logged: an operator
greps for the words it gives ("job queued", not "accepted", which no line says)."""

from __future__ import annotations

import re
from pathlib import Path

from mediamesh.scheduler.core.jobs import JobState

README = Path(__file__).resolve().parents[3] / "README.md"


def _logs_paragraph() -> str:
    text = README.read_text()
    start = text.index("\nLogs: ")
    return text[start : text.index("\n\n", start)]


def test_each_job_line_the_readme_names_is_one_the_scheduler_logs() -> None:
    logged = {f"job {state.value.lower()}" for state in JobState} | {"job refused"}
    named = set(re.findall(r"`(job [a-z]+)`", _logs_paragraph()))
    assert named, "the Logs paragraph names no job line"
    assert named <= logged, named - logged
    # Acceptance is a `job queued` line, as every state change is `job <state>`.
    assert {f"job {s.value.lower()}" for s in JobState} <= named
