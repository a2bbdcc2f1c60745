"""DIR/manifest.jsonl of `mediamesh batch`: one row per attempt at a line, and what it means.

The manifest only grows, a row written as each attempt ends (a run killed midway leaves at
most a row cut short, which is skipped):

    {"line": 7, "key": "batch:<digest>:7:retry1", "input": "/abs/prompts.jsonl",
     "job_id": "...", "state": "FAILED", "file": null, "seconds": 1.2, "error": "CODE: why"}

`key` is the idempotency key the attempt was sent with: the line's key (see batch_file),
followed by ":retry<N>" when N earlier attempts at that same line key ended without a
result. The mesh answers a repeated key with the job it already has, ended or not, so a
line whose job FAILED, EXPIRED or was CANCELLED (or was REJECTED) only runs again under a
key not used before. A run killed before it recorded an attempt repeats that attempt's key
and re-attaches to its job. `input` is the prompts file the row came from (its resolved path).

A line is done when the latest result written for its number (DIR/<line>.<ext>) came from
its very key, and the file is still there; done lines are never sent again.

Which folder belongs to which input: a run continues a folder whose rows name its input
file, or that holds any row of one of its line keys (the same lines, from a copy or a moved
file). A folder holding only rows of other lines from another file belongs to another input,
and the run is refused rather than overwriting those results. Lines edited since their
results were written run again, and the run says how many results they replace.
"""

from __future__ import annotations

import fcntl
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediamesh.cli.batch_file import BatchLine

MANIFEST = "manifest.jsonl"
# Held for a whole run: two runs writing one folder would number each other's results.
LOCK = ".lock"
_RETRY_SUFFIX = re.compile(r":retry\d+$")
# What `input` reads as for rows written before the manifest recorded it.
UNKNOWN_INPUT = "an input not recorded (a manifest of an older mediamesh batch)"


class FolderBusyError(RuntimeError):
    """Another `mediamesh batch` is writing to the output folder."""


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """The output folder to this run alone, until it ends; FolderBusyError while another
    run (of this input or another) holds it. An advisory lock of the kernel's: it goes with
    the process, so a run killed outright leaves nothing to clean up."""
    with (out / LOCK).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusyError(
                f"another mediamesh batch is writing to {out}; wait for it to end, or use "
                "another --out"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def key_of_line(attempt_key: str) -> str:
    """The line key an attempt's key was made from (its ":retry<N>" dropped)."""
    return _RETRY_SUFFIX.sub("", attempt_key)


@dataclass
class History:
    """What the manifest of folder `out` says about earlier attempts."""

    out: Path
    # Each row's input, latest last (once each).
    inputs: list[str] = field(default_factory=list)
    line_keys: set[str] = field(default_factory=set)
    # Attempts at each line key that ended without a result.
    unsuccessful: Counter[str] = field(default_factory=Counter)
    # Line number -> (line key, file name) of the latest result written for that number.
    results: dict[int, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, out: Path) -> History:
        """The history of `out`, empty when it has no manifest."""
        history = cls(out)
        path = out / MANIFEST
        if path.exists():
            for row in _rows(path.read_text(encoding="utf-8", errors="replace")):
                history._add(row)
        return history

    def _add(self, row: dict[str, Any]) -> None:
        key, number = row.get("key"), row.get("line")
        if not isinstance(key, str) or not isinstance(number, int):
            return
        source = row.get("input")
        source = source if isinstance(source, str) else UNKNOWN_INPUT
        if source in self.inputs:
            self.inputs.remove(source)
        self.inputs.append(source)
        line_key = key_of_line(key)
        self.line_keys.add(line_key)
        if row.get("state") == "SUCCEEDED" and isinstance(row.get("file"), str):
            self.results[number] = (line_key, row["file"])
        else:
            self.unsuccessful[line_key] += 1

    def is_done(self, line: BatchLine) -> bool:
        """Whether DIR/<line>.<ext> holds the result of this very line."""
        result = self.results.get(line.number)
        return result is not None and result[0] == line.key and (self.out / result[1]).exists()

    def attempt_key(self, line: BatchLine) -> str:
        """The key to send `line` with: one no ended attempt of it used."""
        failed = self.unsuccessful[line.key]
        return f"{line.key}:retry{failed}" if failed else line.key

    def other_input(self, source: str, lines: Iterable[BatchLine]) -> str | None:
        """The input the folder belongs to when that is not `source` (whose lines are
        `lines`), else None."""
        if not self.inputs or source in self.inputs:
            return None
        if any(line.key in self.line_keys for line in lines):
            return None  # the same lines, from a copy or a moved file
        return self.inputs[-1]

    def replaced(self, lines: Iterable[BatchLine]) -> list[int]:
        """Lines whose number has a result from other content (the line was edited)."""
        return [
            line.number
            for line in lines
            if line.number in self.results and self.results[line.number][0] != line.key
        ]


def _rows(text: str) -> Iterable[dict[str, Any]]:
    for line in text.split("\n"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut short when a run was killed, or a blank line
        if isinstance(row, dict):
            yield row
