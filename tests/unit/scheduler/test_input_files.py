"""Job input files are content-addressed: jobs with the same bytes share one copy on disk
(each holds a hard link of its own, its ref), the copy goes with the last job's link, and a
job's links go once its end is in the store, never before."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.scheduler import input_files
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.input_files import EndedInputs, InputFiles, input_paths, release
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob
from mediamesh.scheduler.store.writer import StoreWriter

from .fakes import new_job

DATA = os.urandom(50_000)
SHA = hashlib.sha256(DATA).hexdigest()


def on_disk(folder: Path) -> tuple[int, int]:
    """(distinct files by inode, their bytes): what the data costs on disk."""
    inodes = {}
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            inodes[stat.st_ino] = stat.st_size
    return len(inodes), sum(inodes.values())


def test_jobs_with_the_same_bytes_share_one_copy_until_the_last_one_goes(tmp_path: Path) -> None:
    files = InputFiles(tmp_path / "inputs")
    paths = [files.keep(SHA, "image", "png", DATA) for _ in range(10)]
    assert len(set(paths)) == 10 and all(p.read_bytes() == DATA for p in paths)
    assert all(p.parent == tmp_path / "inputs" and p.name.startswith(SHA) for p in paths)
    assert on_disk(tmp_path / "inputs") == (1, len(DATA))
    release(paths[:9])
    assert paths[9].read_bytes() == DATA and (files.contents / SHA).is_file()
    release(paths[9:])
    assert on_disk(tmp_path / "inputs") == (0, 0)
    assert not list(files.contents.iterdir())
    release(paths)  # again: nothing to do, nothing raised


def test_a_copy_removed_meanwhile_is_written_again(tmp_path: Path) -> None:
    files = InputFiles(tmp_path / "inputs")
    first = files.keep(SHA, "image", "png", DATA)
    (files.contents / SHA).unlink()  # the last other job ended right then
    second = files.keep(SHA, "mask_image", "png", DATA)
    assert first.read_bytes() == second.read_bytes() == DATA
    release([first])
    assert second.read_bytes() == DATA
    release([second])
    assert on_disk(tmp_path / "inputs") == (0, 0)


def test_without_hard_links_each_job_gets_a_copy_and_it_still_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: object) -> None:
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(input_files.os, "link", no_links)
    files = InputFiles(tmp_path / "inputs")
    paths = [files.keep(SHA, "image", "png", DATA) for _ in range(2)]
    assert [p.read_bytes() for p in paths] == [DATA, DATA]
    release(paths)
    assert on_disk(tmp_path / "inputs") == (0, 0)


def test_release_leaves_alone_what_is_no_job_input_file(tmp_path: Path) -> None:
    other = tmp_path / "inputs" / "results.db"
    other.parent.mkdir()
    other.write_bytes(b"x")
    release([other, tmp_path / "passwd"])
    assert other.is_file()


def test_the_sweep_removes_leftovers_and_keeps_what_jobs_own(tmp_path: Path) -> None:
    files = InputFiles(tmp_path / "inputs")
    owned = files.keep(SHA, "image", "png", DATA)
    leftover = files.keep("a" * 64, "image", "png", b"left by a failed submit")
    lonely = files.contents / ("b" * 64)  # a copy whose last job link went in a crash
    lonely.write_bytes(b"b")
    partial = files.contents / f"{'c' * 64}.{'0' * 32}.partial"
    partial.write_bytes(b"c")
    files.sweep({owned}, older_than=0)  # nothing is that old: all stays
    assert leftover.exists() and lonely.exists() and partial.exists()
    files.sweep({owned}, older_than=9e9)
    assert owned.read_bytes() == DATA and (files.contents / SHA).exists()
    assert not leftover.exists() and not lonely.exists() and not partial.exists()
    assert not (files.contents / ("a" * 64)).exists()


# ---- removed once the end is stored ------------------------------------------------------


def job_with_input(path: Path, job_id: str = "j-1") -> Job:
    params: GenerationParams = dataclasses.replace(
        new_job(model="flux-img2img-tiny").params,
        image=InputImage(SHA, 64, 64, "image/png", str(path)),
        strength=0.7,
    )
    return Job(job_id, "t1", "flux-img2img-tiny", "image", Priority.STANDARD, params, 1000.0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    store = JobStore(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


async def test_a_job_s_input_file_goes_once_its_end_is_in_the_store(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = InputFiles(tmp_path / "inputs")
    job = job_with_input(files.keep(SHA, "image", "png", DATA))
    other = job_with_input(files.keep(SHA, "image", "png", DATA), "j-2")
    await store.insert(job)
    await store.insert(other)
    writer = StoreWriter(store, first_backoff_s=0.05)
    writer.start()
    try:
        job.state = JobState.RUNNING
        writer.save(job)
        assert await writer.flush(5.0)
        assert input_paths(job.params)[0].exists()  # not ended: kept

        # The end's write fails at first: the file stays until it lands.
        real, failures = store.save_many, [1]

        async def failing(*args: object, **kwargs: object) -> list[PurgedJob]:
            if failures:
                failures.pop()
                await asyncio.sleep(0.2)
                raise OSError("disk full")
            return await real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "save_many", failing)
        job.state, job.finished_at = JobState.SUCCEEDED, 1001.0
        writer.save(job)
        await asyncio.sleep(0.1)
        assert input_paths(job.params)[0].exists(), "removed before the end was stored"
        assert await writer.flush(5.0)
        stored = await store.get(job.job_id)
        assert stored is not None and stored[0].state is JobState.SUCCEEDED
        assert not input_paths(job.params)[0].exists()
        # The other job, with the same bytes, keeps them.
        assert input_paths(other.params)[0].read_bytes() == DATA
    finally:
        await writer.close(5.0)


async def test_a_job_ended_on_a_worker_keeps_its_inputs_for_the_grace(
    store: JobStore, tmp_path: Path
) -> None:
    files = InputFiles(tmp_path / "inputs")
    job = job_with_input(files.keep(SHA, "image", "png", DATA))
    queued = job_with_input(files.keep("d" * 64, "image", "png", b"queued"), "j-2")
    for each in (job, queued):
        await store.insert(each)
    writer = StoreWriter(store, ended_inputs=EndedInputs(grace_s=0.5))
    writer.start()
    try:
        # Cancelled while a worker had it: the worker may read it until it hears.
        job.worker_id, job.state = "w0", JobState.CANCELLED
        queued.state = JobState.CANCELLED  # cancelled in the queue: nobody reads it
        writer.save(job)
        writer.save(queued)
        assert await writer.flush(5.0)
        assert input_paths(job.params)[0].exists()
        assert not input_paths(queued.params)[0].exists()
        await asyncio.sleep(1.0)
        assert not input_paths(job.params)[0].exists()
    finally:
        await writer.close(5.0)


async def test_a_stopping_writer_removes_what_waited_for_its_grace(
    store: JobStore, tmp_path: Path
) -> None:
    files = InputFiles(tmp_path / "inputs")
    job = job_with_input(files.keep(SHA, "image", "png", DATA))
    await store.insert(job)
    writer = StoreWriter(store, ended_inputs=EndedInputs(grace_s=600))
    writer.start()
    job.worker_id, job.state = "w0", JobState.EXPIRED
    writer.save(job)
    assert await writer.flush(5.0)
    assert input_paths(job.params)[0].exists()
    await writer.close(5.0)
    assert on_disk(tmp_path / "inputs") == (0, 0)


def test_a_new_link_to_an_old_copy_is_young_for_the_sweep(tmp_path: Path) -> None:
    files = InputFiles(tmp_path / "inputs")
    first = files.keep(SHA, "image", "png", DATA)
    os.utime(files.contents / SHA, (1.0, 1.0))  # a copy linked long ago
    second = files.keep(SHA, "image", "png", DATA)  # a submit still on its way to the store
    files.sweep({first}, older_than=time.time() - 60)
    assert second.read_bytes() == DATA
