"""Deleting the checkpoint files a job leaves, once it ends and none can be resumed from.

A job may leave several: a periodic checkpoint of an attempt whose worker was lost, the
checkpoint a preempted attempt wrote and the next one resumed from, the last periodic one.
The scheduler hears of them one at a time and keeps only the newest, so when the job ends
every name its steps allow is deleted (`mediamesh.common.checkpoint_files`), in each folder
its checkpoints were seen in. Files no job owns are swept after the retention.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from mediamesh.common.checkpoint_files import PARTIAL_SUFFIX, checkpoint_files
from mediamesh.scheduler.core.jobs import Job


class CheckpointFiles:
    """Where each live job's checkpoints were written, and their deletion."""

    def __init__(self, folder: Path) -> None:
        # Where workers write checkpoints by default (the artifact store's "checkpoints").
        self.folder = folder
        self._folders: dict[str, set[Path]] = {}

    def seen(self, job: Job) -> None:
        """Note the folder of the job's current checkpoint, if it has one."""
        if job.checkpoint:
            self._folders.setdefault(job.job_id, {self.folder}).add(Path(job.checkpoint).parent)

    def files_of_ended(self, job: Job) -> list[Path]:
        """Every file the ended job may have left; forgets the job."""
        self.seen(job)
        folders = self._folders.pop(job.job_id, None)
        if folders is None and job.attempts <= 1 and job.worker_losses == 0:
            # One attempt, never lost, never a checkpoint heard of: the worker reports each
            # file it writes on the batch's stream before the job's end, so there is none.
            # (Guessing every name cost a thread and a failed unlink per step for each job.)
            return []
        folders = folders or {self.folder}
        total = job.total_steps or job.params.steps
        return [path for folder in folders for path in checkpoint_files(folder, job.job_id, total)]

    async def delete(self, paths: Iterable[Path]) -> None:
        """Delete the files (off the event loop); missing ones are fine."""
        paths = list(paths)
        if paths:
            await asyncio.to_thread(_unlink_all, paths)

    def sweep(self, live: set[str], older_than: float) -> None:
        """Delete checkpoint files in the default folder that no live job refers to and
        that are older than `older_than` (a Unix time): left by jobs that ended while
        their worker was still writing, or before a restart, and half-written ones of a
        worker lost mid-write (a write under way keeps its file's time recent)."""
        if not self.folder.is_dir():
            return
        for path in (*self.folder.glob("*.pt"), *self.folder.glob(f"*{PARTIAL_SUFFIX}")):
            try:
                if str(path) not in live and path.stat().st_mtime < older_than:
                    path.unlink(missing_ok=True)
            except FileNotFoundError:
                continue  # deleted meanwhile, by a job's end


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
