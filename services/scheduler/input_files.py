"""Job input files, content-addressed: one copy on disk per distinct image, however many
jobs use it, and gone once the last job using it has ended.

Each distinct content is a file `inputs/sha256/<sha256>`. A job does not name that file but a
hard link of its own to it, `inputs/<sha256>.<random>.<input>.<ext>`, and that link is its
input's ref (in its row: a restarted scheduler or a worker finds it as before). So the links
are the reference count, kept by the file system: it survives restarts without any
bookkeeping of ours, and no race between jobs sharing a content can lose one's bytes (a link
removed, or the content's name, never takes the data of another link). A job's links are
removed once its end is in the store (`EndedInputs`, run by the store writer after the
commit): before that a crash would restart the job without them. The content's own name goes
with the last link (`release`); housekeeping (`sweep`) removes what a crash left.

A file system without hard links (or a content at its link limit) gets a copy per job: the
same refs, the same deletion, only not shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import uuid
from collections.abc import Iterable
from pathlib import Path

from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.common.input_refs import is_inline
from mediamesh.scheduler.core.jobs import Job, JobState

log = logging.getLogger("mediamesh.scheduler.inputs")

# The folder, under the inputs folder, holding each distinct content once, named by SHA-256.
CONTENT_FOLDER = "sha256"
_PARTIAL = ".partial"
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A job's link: <sha256>.<32 hex>.<input>.<ext>; before content addressing, <32 hex>.<input>.<ext>.
_JOB_FILE = re.compile(r"(?:(?P<sha>[0-9a-f]{64})\.)?[0-9a-f]{32}\.(?:image|mask_image)\.\w+")
# How long the inputs of a job that ended while on a worker (cancelled, expired, failed by the
# scheduler) are kept: the worker may read them until it hears of the end, and a group that
# found one missing would fail all its jobs.
IN_FLIGHT_GRACE_S = 60.0


def input_paths(params: GenerationParams) -> list[Path]:
    """The files holding the inputs of a job with `params` (inline inputs have none)."""
    images: list[InputImage | None] = [params.image, params.mask_image]
    return [Path(i.ref) for i in images if i is not None and i.ref and not is_inline(i.ref)]


class InputFiles:
    """The content-addressed files under `folder` (blocking: call them in threads)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.contents = folder / CONTENT_FOLDER

    def keep(self, sha256: str, name: str, extension: str, data: bytes) -> Path:
        """A new file of a job's input `name` holding `data` (whose SHA-256 is `sha256`):
        a link to the content's one copy, which is written first if there is none."""
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a SHA-256: {sha256!r}")
        self.contents.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{sha256}.{uuid.uuid4().hex}.{name}.{extension}"
        content = self.contents / sha256
        try:
            # The links share one modification time: made now, before the link exists, the
            # sweep never finds the new link old.
            os.utime(content)
            os.link(content, path)
        except OSError:
            pass  # no copy yet (or just removed), or no links here: write one
        else:
            return path
        partial = self.contents / f"{sha256}.{uuid.uuid4().hex}{_PARTIAL}"
        try:
            partial.write_bytes(data)
            try:
                os.link(partial, path)
            except OSError:
                partial.replace(path)  # no hard links: a copy of its own
            else:
                partial.replace(content)  # a copy written meanwhile keeps its own links
        finally:
            partial.unlink(missing_ok=True)
        return path

    def sweep(self, owned: set[Path], older_than: float) -> None:
        """Delete job files no job in `owned` refers to, and contents no job file links to,
        older than `older_than` (Unix s): what a failed submit or a crash left."""
        if not self.folder.exists():
            return
        for path in self.folder.iterdir():
            if path.name == CONTENT_FOLDER:
                continue
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                if path in owned or path.stat().st_mtime >= older_than:
                    continue
                if _JOB_FILE.fullmatch(path.name):
                    release([path])
                else:
                    path.unlink(missing_ok=True)  # a partial file of an earlier version
        if not self.contents.is_dir():
            return
        for path in self.contents.iterdir():
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                unlinked = stat.st_nlink <= 1 or path.suffix == _PARTIAL
                if unlinked and stat.st_mtime < older_than:
                    path.unlink(missing_ok=True)


def release(paths: Iterable[Path]) -> None:
    """Remove job input files (blocking; missing ones are fine), and each content that no
    other job file links to any more. Paths that are no job input file are left alone."""
    for path in paths:
        found = _JOB_FILE.fullmatch(path.name)
        if found is None:
            log.warning("not removing %s: not a job input file", path)
            continue
        path.unlink(missing_ok=True)
        sha256 = found.group("sha")
        if sha256 is None:
            continue
        content = path.parent / CONTENT_FOLDER / sha256
        with contextlib.suppress(FileNotFoundError):
            # Only the content's own name left. A job linking to it right now either made
            # its link already (it keeps the bytes) or finds the name gone and writes anew.
            if content.stat().st_nlink <= 1:
                content.unlink(missing_ok=True)


class EndedInputs:
    """Removes the input files of jobs whose end has been stored: at once, or after
    IN_FLIGHT_GRACE_S for a job that ended while a worker held it (it may not have heard)."""

    def __init__(self, grace_s: float = IN_FLIGHT_GRACE_S) -> None:
        self.grace_s = grace_s
        self._later: dict[asyncio.Task[None], list[Path]] = {}

    async def ended(self, jobs: Iterable[Job]) -> None:
        """The end of each of `jobs` is in the store."""
        now: list[Path] = []
        later: list[Path] = []
        for job in jobs:
            paths = input_paths(job.params)
            # A job the worker finished (or never had) is done with its inputs.
            done = job.state is JobState.SUCCEEDED or not job.worker_id
            (now if done else later).extend(paths)
        if now:
            await _release(now)
        if later:
            task = asyncio.create_task(self._after_grace(later), name="ended-inputs")
            self._later[task] = later
            task.add_done_callback(lambda t: self._later.pop(t, None))

    async def _after_grace(self, paths: list[Path]) -> None:
        await asyncio.sleep(self.grace_s)
        await _release(paths)

    async def close(self) -> None:
        """Remove what still waits for its grace now: a stopping scheduler's workers take
        nothing more from it."""
        waiting = list(self._later.items())
        for task, _ in waiting:
            task.cancel()
        for task, paths in waiting:
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await _release(paths)
        self._later.clear()


async def _release(paths: list[Path]) -> None:
    try:
        await asyncio.to_thread(release, paths)
    except OSError:
        # Left for housekeeping's sweep at retention: a file not removed costs disk only.
        log.warning("removing the input files of ended jobs failed", exc_info=True)
