"""The names of a job's checkpoint files: the worker writes them, the scheduler deletes them.

A job may leave several: one per periodic checkpoint or preemption, across attempts on
different workers. Once the job ends none can be resumed from, so the scheduler deletes
every name the job's steps allow, not only the last checkpoint it heard of.
"""

from __future__ import annotations

import re
from pathlib import Path

# What a job id may contribute to a file name; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# The suffix of a checkpoint still being written (renamed to ".pt" once complete).
PARTIAL_SUFFIX = ".partial"


# The step in a name `checkpoint_file` made.
_STEP = re.compile(r"-step(\d+)\.pt$")


def checkpoint_file(directory: Path, job_id: str, step: int) -> Path:
    """The file a job's checkpoint after `step` is written to."""
    return directory / f"{_UNSAFE.sub('_', job_id)}-step{step}.pt"


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint named as `checkpoint_file` names it was saved after; None for
    a name of another form."""
    found = _STEP.search(name)
    return int(found.group(1)) if found else None


def checkpoint_files(directory: Path, job_id: str, total_steps: int) -> list[Path]:
    """Every file a job of `total_steps` steps may have left in `directory`: a checkpoint
    after each step but the last, and any that a crash left half-written."""
    files = []
    for step in range(1, max(total_steps, 1)):
        path = checkpoint_file(directory, job_id, step)
        files += [path, path.with_suffix(PARTIAL_SUFFIX)]
    return files
