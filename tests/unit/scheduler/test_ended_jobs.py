"""Which ended jobs stay in memory, and listings merged from memory and a real job store:
each job once, in order, whatever order the ends were stored in, read beside the store's
writes rather than behind them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.scheduler.core.job_listing import JobQuery
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore
from mediamesh.scheduler.ended_jobs import EndedJobs
from mediamesh.scheduler.store.job_store import JobStore, job_row

from .fakes import FakeClock, make_core, new_job


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    store = JobStore(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


async def accepted(core: SchedulerCore, store: JobStore, clock: FakeClock, count: int) -> list[Job]:
    jobs = []
    for _ in range(count):
        clock.advance(1.0)
        outcome = core.prepare(new_job())
        assert isinstance(outcome, Accepted)
        await store.insert(outcome.job)
        core.admit(outcome.job)
        jobs.append(outcome.job)
    core.take_effects()
    return jobs


async def end_at(
    core: SchedulerCore, store: JobStore, clock: FakeClock, job: Job, at: float
) -> None:
    """Cancel the job at time `at` and store its end."""
    clock.now = at
    core.cancel(job.job_id)
    core.take_effects()
    await store.save_many([job_row(job)])


async def listing(ended: EndedJobs, page_size: int, **query) -> list[list[str]]:
    pages, after = [], ""
    while True:
        records, has_more = await ended.page(
            "t1", JobQuery(page_size=page_size, after_job_id=after, **query)
        )
        pages.append([r.job.job_id for r in records])
        if not has_more:
            return pages
        after = records[-1].job.job_id


async def test_the_oldest_stored_ends_leave_memory_and_are_read_back(store: JobStore):
    clock = FakeClock()
    core = make_core(clock)
    jobs = await accepted(core, store, clock, 5)
    ended = EndedJobs(core, store, {}, capacity=2)
    for index, job in enumerate(jobs[:4]):
        await end_at(core, store, clock, job, 2000.0 + index)
        ended.stored([job])
    # Unfinished jobs never leave; of the ended ones, the two stored last stay.
    assert [j.job_id for j in jobs if j.job_id in core.jobs] == [
        jobs[2].job_id,
        jobs[3].job_id,
        jobs[4].job_id,
    ]
    assert ended.dropped_up_to == (2001.0, jobs[1].job_id)
    found = await ended.find(jobs[0].job_id)
    assert found is not None and found.job.state is JobState.CANCELLED
    assert found.job.finished_at == 2000.0
    newest_first = [j.job_id for j in reversed(jobs)]
    assert await listing(ended, 2) == [newest_first[:2], newest_first[2:4], newest_first[4:]]
    assert await listing(ended, 10, oldest_first=True) == [[j.job_id for j in jobs]]
    assert await listing(ended, 10, states=frozenset({JobState.QUEUED})) == [[jobs[4].job_id]]
    assert ended.counts_by_state() == {"CANCELLED": 4, "QUEUED": 1}
    ended.purged(jobs[0].job_id, "CANCELLED")
    assert ended.counts_by_state() == {"CANCELLED": 3, "QUEUED": 1}
    # A job deleted while held in memory leaves the count of those dropped as it was.
    ended.purged(jobs[3].job_id, "CANCELLED")
    core.forget(jobs[3].job_id)
    assert ended.counts_by_state() == {"CANCELLED": 2, "QUEUED": 1}
    assert ended.held == 1


async def test_a_held_job_that_ended_before_a_dropped_one_is_listed_once(store: JobStore):
    clock = FakeClock()
    core = make_core(clock)
    jobs = await accepted(core, store, clock, 6)
    ended = EndedJobs(core, store, {}, capacity=1)
    # Ends stored out of time order (a retried write, or the wall clock stepped back): the
    # job dropped ended after the one still held, which is thus at or below the watermark.
    for at, job in zip([2010.0, 2005.0, 2004.0, 2003.0, 2002.0, 2001.0], jobs, strict=True):
        await end_at(core, store, clock, job, at)
    for job in jobs[:5]:
        ended.stored([job])
    ended.stored([jobs[5]])
    held = [j.job_id for j in jobs if j.job_id in core.jobs]
    assert held == [jobs[5].job_id] and ended.dropped_up_to == (2010.0, jobs[0].job_id)
    newest_first = [j.job_id for j in reversed(jobs)]
    # The store's rows for the first pages begin with the held job as well: it is listed once.
    assert await listing(ended, 1) == [[job_id] for job_id in newest_first]
    assert await listing(ended, 4) == [newest_first[:4], newest_first[4:]]


async def test_with_no_room_every_stored_end_leaves_memory(store: JobStore):
    clock = FakeClock()
    core = make_core(clock)
    jobs = await accepted(core, store, clock, 2)
    ended = EndedJobs(core, store, {}, capacity=0)
    await end_at(core, store, clock, jobs[0], 2000.0)
    # Ended but its end not yet stored: it stays, and the store is not read for it.
    assert jobs[0].job_id in core.jobs and ended.dropped_up_to is None
    ended.stored([jobs[0]])
    assert jobs[0].job_id not in core.jobs
    assert (await ended.find(jobs[0].job_id)) is not None
    # A job the store has but that has not ended is never answered from the store.
    assert (await ended.find(jobs[1].job_id)).job is jobs[1]
    core.forget(jobs[1].job_id)  # no-op: unfinished jobs are never forgotten
    assert jobs[1].job_id in core.jobs


async def test_a_listing_reads_beside_the_writes_not_behind_them(store: JobStore):
    clock = FakeClock()
    core = make_core(clock)
    jobs = await accepted(core, store, clock, 3)
    for at, job in enumerate(jobs, start=10):
        await end_at(core, store, clock, job, float(at))
    # The writer's thread is busy (a long commit, say): a listing still answers.
    writing = threading.Event()
    release = threading.Event()

    def long_write() -> None:
        writing.set()
        release.wait(10)

    busy = store._executor.submit(long_write)
    assert writing.wait(5)
    try:
        page = await asyncio.wait_for(
            store.ended_page(
                up_to=(100.0, "~"),
                tenant="t1",
                states=(),
                models=(),
                after=None,
                oldest_first=True,
                limit=10,
            ),
            5,
        )
    finally:
        release.set()
        busy.result(10)
    assert [job.job_id for job, _ in page] == [job.job_id for job in jobs]
