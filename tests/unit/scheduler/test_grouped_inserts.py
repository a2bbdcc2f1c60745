"""New jobs submitted together share one commit, and each is durable when its insert returns."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.store.job_store import JobStore

from .fakes import FakeClock, make_core, new_job


def prepared_jobs(count: int) -> list:
    core = make_core(FakeClock())
    jobs = []
    for seed in range(count):
        outcome = core.prepare(new_job(seed=seed))
        assert isinstance(outcome, Accepted)
        jobs.append(outcome.job)
    return jobs


def stored_ids(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT job_id FROM jobs")}


async def test_concurrent_inserts_are_each_committed_when_they_return(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    store = JobStore(path)
    try:
        jobs = prepared_jobs(20)
        commits, in_transaction = 0, False

        def count_commits(statement: str) -> None:
            # An INSERT outside BEGIN ... COMMIT commits on its own.
            nonlocal commits, in_transaction
            if statement.startswith("BEGIN"):
                in_transaction = True
            elif statement in ("COMMIT", "ROLLBACK"):
                in_transaction = False
                commits += statement == "COMMIT"
            elif statement.startswith("INSERT") and not in_transaction:
                commits += 1

        store._db.set_trace_callback(count_commits)  # type: ignore[union-attr]
        await asyncio.gather(*(store.insert(job) for job in jobs))
        assert stored_ids(path) == {job.job_id for job in jobs}
        # The first insert went alone; the 19 that arrived meanwhile shared the next commit.
        assert commits <= 3
    finally:
        await store.close()


async def test_a_bad_row_fails_alone_and_the_rest_of_its_group_goes_in(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    store = JobStore(path)
    try:
        first, *others = prepared_jobs(5)
        await store.insert(first)
        outcomes = await asyncio.gather(
            *(store.insert(job) for job in [*others, first]), return_exceptions=True
        )
        assert outcomes[:-1] == [None] * len(others)
        assert isinstance(outcomes[-1], sqlite3.IntegrityError)
        assert stored_ids(path) == {job.job_id for job in [first, *others]}
    finally:
        await store.close()
