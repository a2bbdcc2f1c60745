"""DeleteJob's deletions go through the store writer, after every write of the job: a write
of its end in flight, queued with it, or failed and retried never brings the row back."""

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

RESULT = {"path": "/results/a.png", "mime_type": "image/png", "size_bytes": 1234}


class GatedStore(JobStore):
    """A real store whose writes can be held at a gate, and made to fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = asyncio.Event()
        self.gate.set()
        self.writing = asyncio.Event()
        self.failures = 0
        self.groups: list[list[str]] = []

    async def save_many(
        self, rows: list[tuple[Any, ...]], *others: Any, **kw: Any
    ) -> list[PurgedJob]:
        self.writing.set()
        await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        self.groups.append([row[0] for row in rows])
        return await super().save_many(rows, *others, **kw)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[GatedStore]:
    store = GatedStore(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


async def stored_job(store: JobStore) -> Job:
    outcome = make_core(FakeClock()).prepare(new_job())
    assert isinstance(outcome, Accepted)
    await store.insert(outcome.job)
    return outcome.job


def ended(job: Job) -> Job:
    job.state, job.finished_at = JobState.SUCCEEDED, 1000.0
    return job


async def test_a_delete_queued_with_the_jobs_end_lands_after_it_in_one_group(store: GatedStore):
    stored_ends: list[str] = []
    writer = StoreWriter(store, on_ends_stored=lambda jobs: stored_ends.extend(jobs))
    writer.start()
    job = await stored_job(store)
    writer.save(ended(job), dict(RESULT))

    deleted = await asyncio.wait_for(writer.delete(job.job_id), 5.0)

    assert deleted == PurgedJob(job.job_id, RESULT["path"], (), "SUCCEEDED", 1234, job.tenant)
    assert store.groups == [[job.job_id]]
    assert await store.get(job.job_id) is None
    # The end still counts as stored: its inputs go and it may leave memory.
    assert stored_ends == [job]
    await writer.close(1.0)


async def test_a_delete_waits_for_a_write_of_the_job_in_flight(store: GatedStore):
    writer = StoreWriter(store)
    writer.start()
    job = await stored_job(store)
    store.gate.clear()
    writer.save(ended(job), dict(RESULT))
    await store.writing.wait()

    deleting = writer.delete(job.job_id)
    await asyncio.sleep(0.05)
    assert not deleting.done()
    store.gate.set()

    assert (await asyncio.wait_for(deleting, 5.0)) is not None
    assert store.groups == [[job.job_id], []]
    assert await store.get(job.job_id) is None
    await writer.close(1.0)


async def test_a_failed_group_is_retried_with_its_delete(store: GatedStore):
    writer = StoreWriter(store, first_backoff_s=0.01)
    writer.start()
    job = await stored_job(store)
    store.failures = 2
    writer.save(ended(job), dict(RESULT))
    deleting = writer.delete(job.job_id)

    deleted = await asyncio.wait_for(deleting, 5.0)

    assert deleted is not None and deleted.result_bytes == 1234
    assert await store.get(job.job_id) is None
    await writer.close(1.0)


async def test_deleting_a_job_the_store_lacks_answers_none(store: GatedStore):
    writer = StoreWriter(store)
    writer.start()
    assert await asyncio.wait_for(writer.delete("no-such-job"), 5.0) is None
    await writer.close(1.0)
