"""The job store keeps where a job deleted before its retention stood in listings (its
tenant and acceptance time) until that retention would have ended, and nothing of a job
purged at the end of its retention."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.store.job_store import JobStore, job_row

from .fakes import FakeClock, make_core, new_job


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    store = JobStore(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


async def test_a_deleted_jobs_place_lasts_until_its_retention_would_end(store: JobStore):
    clock = FakeClock(1000.0)
    core = make_core(clock)
    jobs = []
    for tenant in ("t1", "t2"):
        outcome = core.prepare(new_job(tenant=tenant))
        assert isinstance(outcome, Accepted)
        await store.insert(outcome.job)
        core.admit(outcome.job)
        jobs.append(outcome.job)
        clock.advance(1.0)
    clock.now = 2000.0
    for job in jobs:
        core.cancel(job.job_id)
    await store.save_many([job_row(job) for job in jobs])
    deleted, purged = jobs

    [gone] = await store.save_many([], deleted_job_ids=[deleted.job_id])
    assert gone.job_id == deleted.job_id and await store.get(deleted.job_id) is None
    assert await store.deleted_place(deleted.job_id) == ("t1", deleted.created_at)

    # The retention of both jobs has not ended yet: the purge leaves the place alone.
    assert await store.purge(2000.0) == []
    assert await store.deleted_place(deleted.job_id) is not None
    # Once it has, the deleted job's place goes, and a purged job leaves none.
    assert [p.job_id for p in await store.purge(2000.5)] == [purged.job_id]
    assert await store.deleted_place(deleted.job_id) is None
    assert await store.deleted_place(purged.job_id) is None
