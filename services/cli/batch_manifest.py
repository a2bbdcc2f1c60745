"""DIR/manifest.jsonl of `mediamesh batch`: one row per attempt at a line, and what it means.

The manifest only grows, a row written as each attempt ends (a run killed midway leaves at
most a row cut short, which is skipped):

    {"line": 7, "key": "batch:<digest>:7:retry1", "input": "/abs/prompts.jsonl",
     "job_id": "...", "state": "FAILED", "file": null, "seconds": 1.2, "error": "CODE: why",
     "run_id": "<32 hex digits>"}

`run_id` is the batch's scope, part of every line's key (see batch_file): random for each
new folder, so that two folders of the same prompts never share jobs, and kept with the
folder, so that a folder moved or copied elsewhere resumes where it stood rather than
running every line again. It is made once, before anything is sent, into DIR/batch.json
(`{"manifest_version": 2, "run_id": ...}`, written whole or not at all), and every row
repeats it: the rows' own wins, since it made their keys, and the file holds it until the
first row is written (a run killed before then still resumes its jobs). A folder begun by an
older mediamesh batch (rows without `run_id`, no batch.json), whose keys were made with the
folder's own path, gets that path as its run id the first time this version runs it, so
its results still count; from then on it may move too. A manifest_version above
MANIFEST_VERSION is refused (a newer mediamesh batch wrote it) rather than misread.

`key` is the idempotency key the attempt was sent with: the line's key (see batch_file),
followed by ":retry<N>" when N earlier attempts at that same line key ended without a
result. The mesh answers a repeated key with the job it already has, ended or not, so a
line whose job FAILED, EXPIRED or was CANCELLED (or was REJECTED) only runs again under a
key not used before. A run killed before it recorded an attempt repeats that attempt's key
and re-attaches to its job. `input` is the prompts file the row came from (its resolved path).

A line is done when the latest result written for its number (DIR/<line>.<ext>) came from
its very key, and the file is still there; done lines are never sent again. An edited line's
attempt that ends without a result removes its number's file of the old content, so a later
row of it without a result means no file.

DIR/deleted.txt lists, one a line, the jobs `--delete-results` deleted (or found gone): a
run stopped between a row and its deletion leaves a job ended, recorded and not listed, and a
re-run with the flag deletes it. The manifest's rows stay one per attempt.

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
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediamesh.cli.batch_file import BatchLine

MANIFEST = "manifest.jsonl"
# The folder's run id, made once (see above).
RUN_FILE = "batch.json"
# The layout of a folder: 2 added the run id; 1 (no batch.json, keys from the folder's path)
# came before.
MANIFEST_VERSION = 2
# The jobs `--delete-results` deleted from the mesh, one id a line (see above).
DELETED = "deleted.txt"
# Held for a whole run: two runs writing one folder would number each other's results.
LOCK = ".lock"
_RETRY_SUFFIX = re.compile(r":retry\d+$")
# What `input` reads as for rows written before the manifest recorded it.
UNKNOWN_INPUT = "an input not recorded (a manifest of an older mediamesh batch)"


class FolderBusyError(RuntimeError):
    """Another `mediamesh batch` is writing to the output folder."""


class RunFileError(RuntimeError):
    """DIR/batch.json cannot be used: a newer mediamesh batch wrote it, or it is unreadable."""


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
    # The batch's scope as the rows record it (the first row that does); None if none does.
    run_id: str | None = None
    # Job id -> state of each attempt that made a job; the job ids --delete-results deleted.
    jobs: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, out: Path) -> History:
        """The history of `out`, empty when it has no manifest."""
        history = cls(out)
        path = out / MANIFEST
        if path.exists():
            for row in _rows(path.read_text(encoding="utf-8", errors="replace")):
                history._add(row)
        deleted = out / DELETED
        if deleted.exists():
            history.deleted = set(deleted.read_text(encoding="utf-8", errors="replace").split())
        return history

    def scope(self) -> str:
        """The run id this folder's keys are made with, made (and written to batch.json)
        when the folder has none yet; RunFileError for a batch.json this version cannot
        read. Call it with the folder locked."""
        recorded = _read_run_file(self.out)
        if self.run_id is not None:
            run_id = self.run_id
        elif recorded is not None:
            return recorded
        elif self.inputs:
            # Rows without a run id came from an older mediamesh batch, which made its keys
            # with the folder's resolved path: keeping that path keeps its results.
            run_id = str(self.out.resolve())
        else:
            run_id = uuid.uuid4().hex
        if recorded != run_id:
            _write_run_file(self.out, run_id)
        return run_id

    def _add(self, row: dict[str, Any]) -> None:
        key, number = row.get("key"), row.get("line")
        if not isinstance(key, str) or not isinstance(number, int):
            return
        run_id = row.get("run_id")
        if self.run_id is None and isinstance(run_id, str) and run_id:
            self.run_id = run_id
        source = row.get("input")
        source = source if isinstance(source, str) else UNKNOWN_INPUT
        if source in self.inputs:
            self.inputs.remove(source)
        self.inputs.append(source)
        line_key = key_of_line(key)
        self.line_keys.add(line_key)
        job_id, state = row.get("job_id"), row.get("state")
        if isinstance(job_id, str) and job_id and isinstance(state, str):
            self.jobs[job_id] = state
        if state == "SUCCEEDED" and isinstance(row.get("file"), str):
            self.results[number] = (line_key, row["file"])
        else:
            self.unsuccessful[line_key] += 1
            if self.results.get(number, (line_key,))[0] != line_key:
                # An edited line that made no result: its old content's file was removed.
                del self.results[number]

    def superseded_file(self, line: BatchLine, file_name: str | None) -> str | None:
        """The earlier result of `line`'s number that its new attempt supersedes without
        overwriting it: one of other content (the line was edited) when the attempt made no
        result (`file_name` None), or one of another name (another format); else None."""
        result = self.results.get(line.number)
        if result is None or result[1] == file_name or Path(result[1]).name != result[1]:
            return None  # the same name is overwritten; a path elsewhere is not ours to touch
        if file_name is None and result[0] == key_of_line(line.key):
            return None  # a failed retry of the same content has no file to supersede
        return result[1]

    def undeleted_jobs(self, ended_states: frozenset[str]) -> list[str]:
        """The jobs of attempts that ended in `ended_states` and were not deleted (a run
        stopped between a row and its deletion, or run without --delete-results)."""
        return [
            job_id
            for job_id, state in self.jobs.items()
            if state in ended_states and job_id not in self.deleted
        ]

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


def _read_run_file(out: Path) -> str | None:
    """The run id DIR/batch.json holds; None without the file."""
    path = out / RUN_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunFileError(f"{path}: cannot be read ({exc}); remove it to go on") from None
    version = record.get("manifest_version") if isinstance(record, dict) else None
    run_id = record.get("run_id") if isinstance(record, dict) else None
    if isinstance(version, int) and version > MANIFEST_VERSION:
        raise RunFileError(
            f"{path} has manifest_version {version}, written by a newer mediamesh batch; this "
            f"one reads up to {MANIFEST_VERSION}: run that version, or use another --out"
        )
    if not isinstance(run_id, str) or not run_id:
        raise RunFileError(f"{path}: no run_id in it; remove it to go on")
    return run_id


def _write_run_file(out: Path, run_id: str) -> None:
    """DIR/batch.json naming `run_id`, replaced whole: a run killed meanwhile leaves the old
    file or the new one, never half of one."""
    path = out / RUN_FILE
    partial = path.with_name(path.name + ".part")
    record = {"manifest_version": MANIFEST_VERSION, "run_id": run_id}
    partial.write_text(json.dumps(record) + "\n", encoding="utf-8")
    partial.replace(path)


def _rows(text: str) -> Iterable[dict[str, Any]]:
    for line in text.split("\n"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut short when a run was killed, or a blank line
        if isinstance(row, dict):
            yield row
