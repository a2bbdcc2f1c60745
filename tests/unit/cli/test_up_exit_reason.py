"""`mediamesh up` says why a child exited, from what that run of the child wrote to its log."""

from __future__ import annotations

from pathlib import Path

from mediamesh.cli.up import Child

EARLIER_RUN = "mediamesh: gateway.port: cannot listen on 127.0.0.1:50051: an earlier run\n"

CRASH = """\
2026-01-01 00:00:00,000 scheduler INFO starting
Traceback (most recent call last):
  File "/x/store.py", line 10, in open
    connect(path)
sqlite3.OperationalError: unable to open database file

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/main.py", line 3, in <module>
    start()
RuntimeError: the store at /x/jobs.sqlite3 cannot be opened
  and a second line of the same message
"""


def _child_with_log(tmp_path: Path, earlier: str, this_run: str) -> Child:
    child = Child("scheduler", argv=[], address="127.0.0.1:1")
    child.log_path = tmp_path / "scheduler.log"
    child.log_path.write_text(earlier + this_run)
    child.log_offset = len(earlier.encode())
    return child


def test_the_one_line_error_of_this_run(tmp_path: Path) -> None:
    this_run = "INFO starting\nmediamesh: scheduler.port: cannot listen on 127.0.0.1:9: busy\n"
    child = _child_with_log(tmp_path, EARLIER_RUN, this_run)
    assert child.exit_reason() == "scheduler.port: cannot listen on 127.0.0.1:9: busy"


def test_without_one_the_exception_a_traceback_ended_with(tmp_path: Path) -> None:
    child = _child_with_log(tmp_path, EARLIER_RUN, CRASH)
    assert child.exit_reason() == "RuntimeError: the store at /x/jobs.sqlite3 cannot be opened"


def test_nothing_when_the_log_says_neither(tmp_path: Path) -> None:
    child = _child_with_log(tmp_path, CRASH, "INFO starting\nINFO serving\n")
    assert child.exit_reason() is None
