"""A pass of the store writer whose one transaction fails writes each job's part alone:
one row the store cannot take (a large result on a full disk) holds back only its own job,
and the others, whose ends may already have been announced, land."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob
from mediamesh.scheduler.store.writer import StoreWriter

from .fakes import FakeClock, make_core, new_job

# Results' bytes the "full disk" has no room for.
ROOM_BYTES = 1024


class FullDisk(JobStore):
    """A real store that refuses any transaction carrying more result bytes than it has room."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.room = ROOM_BYTES

    async def save_many(
        self, rows: list[tuple[Any, ...]], *others: Any, **kw: Any
    ) -> list[PurgedJob]:
        results: list[tuple[str, bytes]] = others[1] if len(others) > 1 else []
        if sum(len(data) for _, data in results) > self.room:
            raise sqlite3.OperationalError("database or disk is full")
        return await super().save_many(rows, *others, **kw)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullDisk]:
    store = FullDisk(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


async def stored_jobs(store: JobStore, count: int) -> list[Job]:
    core = make_core(FakeClock())
    jobs = []
    for _ in range(count):
        outcome = core.prepare(new_job())
        assert isinstance(outcome, Accepted)
        await store.insert(outcome.job)
        jobs.append(outcome.job)
    return jobs


def succeeded(job: Job) -> Job:
    job.state, job.finished_at = JobState.SUCCEEDED, 1000.0
    return job


async def state_in(store: JobStore, job: Job) -> JobState | None:
    found = await store.get(job.job_id)
    return found[0].state if found else None


async def test_a_row_the_store_cannot_take_holds_back_only_its_own_job(store: FullDisk) -> None:
    ends_stored: list[str] = []
    writer = StoreWriter(
        store,
        first_backoff_s=0.05,
        on_ends_stored=lambda jobs: ends_stored.extend(j.job_id for j in jobs),
    )
    small, large, other = await stored_jobs(store, 3)
    writer.save_result(large.job_id, b"x" * (ROOM_BYTES * 2))
    for job in (small, large, other):
        writer.save(succeeded(job), {"path": f"jobstore:{job.job_id}/image/png"})
    writer.start()
    try:
        for _ in range(100):
            if len(ends_stored) == 2:
                break
            await asyncio.sleep(0.02)
        assert sorted(ends_stored) == sorted([small.job_id, other.job_id])
        assert await state_in(store, small) is JobState.SUCCEEDED
        assert await state_in(store, other) is JobState.SUCCEEDED
        assert await state_in(store, large) is JobState.QUEUED
        assert writer.pending == 1

        # Room again: the held-back job lands with its bytes.
        store.room = ROOM_BYTES * 4
        assert await writer.flush(5.0)
        assert await state_in(store, large) is JobState.SUCCEEDED
        assert await store.read_result(large.job_id) == b"x" * (ROOM_BYTES * 2)
    finally:
        await writer.close(1.0)
