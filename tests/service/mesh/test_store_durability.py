"""A store that fails cannot lose a job or run one it has no record of (issue 13, item 6).

Before, a job entered the core before its row was written: with a failing store, Submit
answered INTERNAL while the job ran anyway, none of its state changes were written, and
their errors vanished. After a restart, a finished job past its retention that was not yet
purged held its idempotency key, and re-submitting the key raised IntegrityError.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.scheduler.batches import WorkerLink
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.link_wrappers import ForwardingLink


class FailingStore(JobStore):
    """The real SQLite store, whose writes fail on demand the way a full or broken disk's do."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.refuse_inserts = False
        self.save_failures_left = 0
        # Set to hold inserts until it is set (two submits racing with one key).
        self.insert_gate: asyncio.Event | None = None

    async def insert(self, job: Job) -> None:
        if self.insert_gate is not None:
            await self.insert_gate.wait()
        if self.refuse_inserts:
            raise sqlite3.OperationalError("disk I/O error")
        await super().insert(job)

    async def save_many(self, rows: list[tuple[Any, ...]], *others: Any) -> list[PurgedJob]:
        if self.save_failures_left > 0:
            self.save_failures_left -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return await super().save_many(rows, *others)


class RecordingLink(ForwardingLink):
    """The real link to the workers, noting every batch the scheduler sends."""

    def __init__(self, link: WorkerLink) -> None:
        super().__init__(link)
        self.batches: list[list[str]] = []

    def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: str
    ) -> AsyncIterator[list[WorkerEvent]]:
        self.batches.append([job.job_id for job in jobs])
        return super().run_batch(address, batch_id, model, jobs, **options)


def failures(op: str) -> float:
    return REGISTRY.get_sample_value("mediamesh_store_write_failures_total", {"op": op}) or 0.0


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def final_state(mesh: InProcessMesh, job_id: str) -> str:
    stub = mesh.gateway_stub()
    async for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=30):
        if event.WhichOneof("event") in ("result", "error"):
            return common_pb2.JobState.Name(event.state)
    return "NO_RESULT"


async def stored_state(store: JobStore, job_id: str, timeout: float = 10.0) -> JobState | None:
    """The job's state in the store once it is terminal there (or as it is at the timeout)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await store.get(job_id)
        state = found[0].state if found else None
        if (state is not None and state.terminal) or (asyncio.get_running_loop().time() > deadline):
            return state
        await asyncio.sleep(0.05)


def echo(key: str = "") -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key=key)


async def test_a_store_that_refuses_the_job_answers_unavailable_and_nothing_runs(
    tmp_path: Path, models_dir: Path
) -> None:
    store = FailingStore(tmp_path / "jobs.sqlite3")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], store=store)
    try:
        runtime = mesh.scheduler.runtime
        link = runtime.batches.link = RecordingLink(runtime.batches.link)
        stub = mesh.gateway_stub()
        before = failures("insert")
        store.refuse_inserts = True
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Submit(echo("nightly-1"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert failures("insert") > before
        # Several dispatch passes later nothing was sent to the worker, nor held, nor stored.
        await asyncio.sleep(3 * mesh.config.scheduler.heartbeat_interval_s)
        assert link.batches == []
        assert dict(mesh.core.jobs) == {}
        assert await store.counts() == {}
        # The client's retry with the same key is a new job (no phantom to deduplicate onto),
        # recorded, and it runs.
        store.refuse_inserts = False
        handle = await stub.Submit(echo("nightly-1"), timeout=10)
        assert not handle.deduplicated
        assert await final_state(mesh, handle.job_id) == "SUCCEEDED"
        assert link.batches == [[handle.job_id]]
        assert await stored_state(store, handle.job_id) is JobState.SUCCEEDED
    finally:
        await stop_mesh(mesh)


async def test_failed_state_writes_are_retried_counted_and_land(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FailingStore(tmp_path / "jobs.sqlite3")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], store=store)
    try:
        stub = mesh.gateway_stub()
        before = failures("transition")
        # The job is accepted (its insert works); its first three state writes fail.
        store.save_failures_left = 3
        handle = await stub.Submit(echo(), timeout=10)
        assert await final_state(mesh, handle.job_id) == "SUCCEEDED"
        assert await stored_state(store, handle.job_id) is JobState.SUCCEEDED
        found = await store.get(handle.job_id)
        assert found is not None and found[1] is not None  # the artifact is recorded too
        assert failures("transition") - before == 3
        assert store.save_failures_left == 0
        assert "retrying" in caplog.text
        assert mesh.scheduler.runtime.writer.pending == 0
    finally:
        await stop_mesh(mesh)


async def test_concurrent_submits_with_one_key_share_one_recorded_job(
    tmp_path: Path, models_dir: Path
) -> None:
    store = FailingStore(tmp_path / "jobs.sqlite3")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], store=store)
    try:
        stub = mesh.gateway_stub()
        gate = store.insert_gate = asyncio.Event()
        calls = [asyncio.ensure_future(stub.Submit(echo("twice"), timeout=10)) for _ in range(2)]
        await asyncio.sleep(0.3)  # both are in the scheduler, the first one's write held
        gate.set()
        first, second = await asyncio.gather(*calls)
        assert first.job_id == second.job_id
        assert sorted([first.deduplicated, second.deduplicated]) == [False, True]
        assert await final_state(mesh, first.job_id) == "SUCCEEDED"
        # Watchers hear of the end from memory; its row lands with the writer's next round.
        assert await mesh.scheduler.runtime.writer.flush(10)
        assert await store.counts() == {"SUCCEEDED": 1}
    finally:
        await stop_mesh(mesh)


async def test_a_key_whose_job_passed_its_retention_before_a_restart_is_free_again(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        stub = mesh.gateway_stub()
        old = await stub.Submit(echo("daily-report"), timeout=10)
        assert await final_state(mesh, old.job_id) == "SUCCEEDED"
        old_artifact = mesh.scheduler.runtime.results[old.job_id].path
        retention_s = mesh.config.scheduler.retention_s
    finally:
        await stop_mesh(mesh)
    # Ended just past its retention: a restart does not load it, and the purge that runs
    # every minute has not come yet.
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
        db.execute(
            "UPDATE jobs SET finished_at = finished_at - ? WHERE job_id = ?",
            (retention_s + 5, old.job_id),
        )
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        stub = mesh.gateway_stub()
        new = await stub.Submit(echo("daily-report"), timeout=10)
        assert new.job_id != old.job_id and not new.deduplicated
        assert await final_state(mesh, new.job_id) == "SUCCEEDED"
        store = mesh.scheduler.runtime.store
        assert await store.get(old.job_id) is None
        assert not await mesh.scheduler.runtime.artifacts.exists(old_artifact)
        assert not await store.has_result(old.job_id)
        assert await stored_state(store, new.job_id) is JobState.SUCCEEDED
        # A retry of the new submission finds the new job.
        again = await stub.Submit(echo("daily-report"), timeout=10)
        assert again.job_id == new.job_id and again.deduplicated
    finally:
        await stop_mesh(mesh)
