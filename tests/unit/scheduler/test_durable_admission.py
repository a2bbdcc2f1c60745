"""Admission in two steps, so the owner can make a job durable before it queues; the job
store's schema migration; the background writer's retries (issue 13, items 6 and 11)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from mediamesh.common.errors import StartupError
from mediamesh.scheduler.core.effects import Transition
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.main import _open_store
from mediamesh.scheduler.store import job_store
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob, job_row
from mediamesh.scheduler.store.writer import IN_FLIGHT_WRITE_DELAY_S, StoreWriter

from .fakes import FakeClock, make_core, new_job, worker

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def prepared(core, **kwargs) -> Job:
    outcome = core.prepare(new_job(**kwargs))
    assert isinstance(outcome, Accepted) and not outcome.deduplicated, outcome
    return outcome.job


def test_a_prepared_job_is_neither_held_nor_queued_until_admitted():
    core = make_core(FakeClock())
    core.register_worker(worker("w0"))
    job = prepared(core, key="k")
    assert job.job_id not in core.jobs
    assert core.queue_depth("image") == 0 and core.take_effects() == []
    assert core.schedule() == []
    # Preparing again finds nothing under the key: nothing was held.
    assert prepared(core, key="k").job_id != job.job_id
    assert core.admit(job) == Accepted(job)
    assert core.jobs[job.job_id] is job and core.queue_depth("image") == 1
    assert core.take_effects() == [Transition(job, JobState.QUEUED)]


def test_admitting_a_key_already_held_returns_the_held_job():
    core = make_core(FakeClock())
    first, second = prepared(core, key="k"), prepared(core, key="k")
    core.admit(first)
    assert core.admit(second) == Accepted(first, deduplicated=True)
    assert second.job_id not in core.jobs and core.queue_depth("image") == 1


def test_a_store_made_before_the_added_columns_gains_them(tmp_path: Path):
    path = tmp_path / "jobs.sqlite3"
    core = make_core(FakeClock())
    old = prepared(core)
    added = job_store._ADDED_COLUMNS
    first_schema = job_store._SCHEMA
    for column, definition in added.items():
        first_schema = first_schema.replace(f",\n    {column} {definition}", "")
    kept = [(c, v) for c, v in zip(job_store._COLUMNS, job_row(old), strict=True) if c not in added]
    with sqlite3.connect(path) as db:
        db.executescript(first_schema)
        present = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
        assert not present & set(added)
        db.execute(
            f"INSERT INTO jobs ({','.join(c for c, _ in kept)}) "
            f"VALUES ({','.join('?' * len(kept))})",
            [v for _, v in kept],
        )

    async def reopen() -> tuple[Job, Job]:
        store = JobStore(path)
        try:
            new = prepared(core)
            new.trace_carrier = dict(TRACE)
            await store.insert(new)
            loaded = {job.job_id: job for job, _ in (await store.load(0.0, 10)).unfinished}
            return loaded[old.job_id], loaded[new.job_id]
        finally:
            await store.close()

    loaded_old, loaded_new = asyncio.run(reopen())
    assert loaded_old.trace_carrier == {} and loaded_new.trace_carrier == TRACE
    assert (loaded_old.last_worker_id, loaded_old.batch_id, loaded_old.pauses) == ("", None, 0)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == job_store.SCHEMA_VERSION


def test_a_store_in_a_newer_format_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "jobs.sqlite3"
    newer = job_store.SCHEMA_VERSION + 1
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={newer}")
        db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, shape_unknown_here BLOB)")
    with pytest.raises(StartupError) as refused:
        _open_store(path)
    assert str(refused.value).startswith(f"scheduler.store_path: cannot open {path}: ")
    assert f"format {newer}, written by a newer mediamesh" in str(refused.value)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == newer
        assert [r[1] for r in db.execute("PRAGMA table_info(jobs)")] == [
            "job_id",
            "shape_unknown_here",
        ]


class FlakyStore:
    """Records the groups written; the first `failures` writes fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.groups: list[list[tuple[Any, ...]]] = []
        self.writing = asyncio.Event()

    async def save_many(self, rows: list[tuple[Any, ...]], *_others: Any) -> list[PurgedJob]:
        self.writing.set()
        await asyncio.sleep(0.01)
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        self.groups.append(rows)
        return []


def test_a_failed_write_is_retried_with_the_newest_state_and_the_result_it_carried():
    async def scenario() -> FlakyStore:
        store = FlakyStore(failures=2)
        writer = StoreWriter(store, first_backoff_s=0.01)  # type: ignore[arg-type]
        writer.start()
        job = prepared(make_core(FakeClock()))
        job.state = JobState.SUCCEEDED
        writer.save(job, {"path": "/a.png"})
        await store.writing.wait()
        # While the failing write is in flight the job is saved again, without a result.
        job.error_message = "later"
        writer.save(job)
        assert await writer.flush(5.0)
        await writer.close(1.0)
        return store

    store = asyncio.run(scenario())
    assert len(store.groups) == 1  # one landed write, of the newest state, with the result
    (row,) = store.groups[0]
    columns = dict(zip(job_store._COLUMNS, row, strict=True))
    assert columns["error_message"] == "later" and columns["result"] == '{"path": "/a.png"}'


def test_a_job_moving_onto_a_worker_waits_for_its_end_and_lands_with_it():
    async def scenario() -> tuple[FlakyStore, float]:
        store = FlakyStore(failures=0)
        writer = StoreWriter(store)  # type: ignore[arg-type]
        writer.start()
        core = make_core(FakeClock())
        job, other = prepared(core), prepared(core)
        job.state = JobState.RUNNING
        writer.save(job, may_wait=True)
        await asyncio.sleep(IN_FLIGHT_WRITE_DELAY_S / 5)
        assert store.groups == []  # still waiting for more
        job.state = JobState.SUCCEEDED
        writer.save(job)
        assert await writer.flush(5.0)
        # Alone, a job going onto a worker still lands, after the delay at most.
        other.state = JobState.DISPATCHED
        started = time.monotonic()
        writer.save(other, may_wait=True)
        assert await writer.flush(5.0)
        waited = time.monotonic() - started
        await writer.close(1.0)
        return store, waited

    store, waited = asyncio.run(scenario())
    states = [
        [dict(zip(job_store._COLUMNS, row, strict=True))["state"] for row in group]
        for group in store.groups
    ]
    assert states == [["SUCCEEDED"], ["DISPATCHED"]]
    assert waited < IN_FLIGHT_WRITE_DELAY_S + 0.5
