"""A scheduler's failures show in its traces, metrics, logs and health.

Before, the `batch` span stayed UNSET when its jobs failed; a Submit refused at admission
(a full queue, a tenant's quota, a deadline that cannot be met, a failing store) was in no
metric and no log line; and a scheduler whose job store failed, answering every Submit
UNAVAILABLE, kept reporting SERVING, so readiness kept sending it work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode as SpanStatus
from prometheus_client import REGISTRY

from mediamesh.common.api.health import LIVENESS_SERVICE
from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.common.work import JobFailed, JobParams, WorkerEvent
from mediamesh.scheduler import runtime as runtime_module
from mediamesh.scheduler import tracing
from mediamesh.scheduler.core.jobs import JobState
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.link_wrappers import ForwardingLink
from tests.service.mesh.test_health_follows_state import status_of, until_status
from tests.service.mesh.test_store_durability import FailingStore, until
from tests.span_recording import recorded_spans

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


class BrokenDeviceLink(ForwardingLink):
    """Every job of every batch fails on its worker with INTERNAL."""

    async def run_batch(  # type: ignore[override]
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: str
    ) -> AsyncIterator[list[WorkerEvent]]:
        yield [JobFailed(j.job_id, "INTERNAL", "CUDA error: device on fire") for j in jobs]


class DownStore(FailingStore):
    """Refused inserts refuse the probe too, as a full disk would."""

    async def probe(self) -> None:
        if self.refuse_inserts:
            raise OSError("disk I/O error")
        await super().probe()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans(monkeypatch, tracing)


async def submit(mesh: InProcessMesh, model: str = "echo", tenant: str = "acme") -> str:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}") as channel:
        handle = await scheduler_pb2_grpc.SchedulerStub(channel).Submit(
            scheduler_pb2.SubmitRequest(
                tenant=tenant, request=common_pb2.GenerateRequest(model=model, prompt="x")
            ),
            metadata=(("traceparent", f"00-{TRACE_ID}-00f067aa0ba902b7-01"),),
            timeout=10,
        )
    return handle.job_id


async def refused(mesh: InProcessMesh, model: str = "echo") -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await submit(mesh, model)
    return raised.value.code()


def refusals(queue: str, reason: str) -> float | None:
    labels = {"queue": queue, "reason": reason}
    return REGISTRY.get_sample_value("mediamesh_jobs_refused_total", labels)


async def test_a_job_failed_on_its_worker_sets_the_batch_span_to_error(
    tmp_path: Path, models_dir: Path, spans: InMemorySpanExporter
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        runtime = mesh.scheduler.runtime
        runtime.batches.link = BrokenDeviceLink(runtime.batches.link)
        job_id = await submit(mesh)
        await until(lambda: mesh.core.jobs[job_id].state is JobState.FAILED)
        await until(lambda: any(s.name == "batch" for s in spans.get_finished_spans()))
    finally:
        await stop_mesh(mesh)
    (batch,) = [s for s in spans.get_finished_spans() if s.name == "batch"]
    assert batch.status.status_code is SpanStatus.ERROR
    assert batch.status.description == f"job {job_id} INTERNAL: CUDA error: device on fire"
    assert format(batch.context.trace_id, "032x") == TRACE_ID


async def test_a_job_that_succeeds_leaves_the_batch_span_unset(
    tmp_path: Path, models_dir: Path, spans: InMemorySpanExporter
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        job_id = await submit(mesh)
        await until(lambda: mesh.core.jobs[job_id].state is JobState.SUCCEEDED)
        await until(lambda: any(s.name == "batch" for s in spans.get_finished_spans()))
    finally:
        await stop_mesh(mesh)
    (batch,) = [s for s in spans.get_finished_spans() if s.name == "batch"]
    assert batch.status.status_code is SpanStatus.UNSET


async def test_a_job_that_ends_in_its_queue_has_a_queue_wait_span(
    tmp_path: Path, models_dir: Path, spans: InMemorySpanExporter
) -> None:
    # No worker hosts flux-tiny: its jobs wait until they expire or are cancelled. Their
    # traces held no scheduler span at all, since only a dispatch made the queue wait span.
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}") as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            ids = []
            for timeout_s in (0.8, 0):
                request = common_pb2.GenerateRequest(model="flux-tiny", prompt="x")
                deadline_ms = int((time.time() + timeout_s) * 1000) if timeout_s else 0
                handle = await stub.Submit(
                    scheduler_pb2.SubmitRequest(
                        tenant="acme", request=request, deadline_unix_ms=deadline_ms
                    ),
                    metadata=(("traceparent", f"00-{TRACE_ID}-00f067aa0ba902b7-01"),),
                    timeout=10,
                )
                ids.append(handle.job_id)
            expiring, cancelled = ids
            await stub.Cancel(
                scheduler_pb2.ScopedJobRequest(job_id=cancelled, tenant="acme"), timeout=10
            )
            await until(lambda: mesh.core.jobs[expiring].state is JobState.EXPIRED)
    finally:
        await stop_mesh(mesh)
    waits = {
        s.attributes["mediamesh.job_id"]: s
        for s in spans.get_finished_spans()
        if s.name == "queue wait" and s.attributes
    }
    assert set(waits) == {expiring, cancelled}
    assert waits[expiring].status.status_code is SpanStatus.ERROR
    assert (waits[expiring].status.description or "").startswith("EXPIRED: ")
    assert waits[cancelled].status.status_code is SpanStatus.UNSET
    assert waits[cancelled].attributes["mediamesh.state"] == "CANCELLED"
    for span in waits.values():
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time > span.start_time


async def test_refusals_at_admission_are_counted_by_reason_and_logged_sparingly(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    # No worker: the first job stays queued and fills the queue.
    mesh = await start_mesh(
        tmp_path, models_dir, [], scheduler={"queues": {"image": {"sla_s": 30.0, "max_depth": 1}}}
    )
    try:
        # Declared at start, so that rate() sees the first refusal.
        assert refusals("image", "queue_full") is not None
        full_before = refusals("image", "queue_full") or 0.0
        await submit(mesh)
        assert await refused(mesh) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await refused(mesh) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refusals("image", "queue_full") == full_before + 2
        # The second refusal of a kind within the minute is counted, not logged; the next
        # line of that kind says how many went unlogged.
        mesh.scheduler.runtime._refusal_log.reset()
        assert await refused(mesh) == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await stop_mesh(mesh)
    lines = [
        (r.levelno, r.fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "job refused"
    ]
    full = [fields for level, fields in lines if fields["reason"] == "queue_full"]
    assert [f["unlogged"] for f in full] == [0, 1]
    assert full[0]["queue"] == "image" and full[0]["code"] == "RESOURCE_EXHAUSTED"
    assert full[0]["trace_id"] == TRACE_ID
    assert {level for level, f in lines if f["reason"] == "queue_full"} == {logging.WARNING}


async def test_requests_refused_before_admission_are_counted_too(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    invalid_before = refusals("image", "invalid_request") or 0.0
    unknown_before = refusals("unknown", "unknown_model") or 0.0
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}") as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            too_many = common_pb2.GenerateRequest(model="echo", prompt="x", steps=10_000)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Submit(scheduler_pb2.SubmitRequest(tenant="acme", request=too_many))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert await refused(mesh, model="no-such-model") == grpc.StatusCode.NOT_FOUND
    finally:
        await stop_mesh(mesh)
    assert refusals("image", "invalid_request") == invalid_before + 1
    assert refusals("unknown", "unknown_model") == unknown_before + 1
    reasons = {
        r.fields["reason"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "job refused"
    }
    assert {"invalid_request", "unknown_model"} <= reasons


async def test_a_failing_store_turns_readiness_off_until_it_recovers(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_module, "STORE_PROBE_INTERVAL_S", 0.1)
    store = DownStore(tmp_path / "jobs.sqlite3")
    lost_after_s = 0.3
    gateway = {"scheduler_lost_after_s": lost_after_s}
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=gateway, store=store)
    address = f"127.0.0.1:{mesh.scheduler.port}"
    gateway_address = f"127.0.0.1:{mesh.gateway.port}"
    try:
        assert await status_of(address) == "SERVING"
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="x")
        earlier = (await stub.Submit(request, timeout=10)).job_id
        before = refusals("image", "store_unavailable") or 0.0
        store.refuse_inserts = True
        assert await refused(mesh) == grpc.StatusCode.UNAVAILABLE
        assert refusals("image", "store_unavailable") == before + 1
        await until_status(address, "NOT_SERVING", timeout=5)
        # Out of rotation, not dead: a restart would not mend the disk.
        assert await status_of(address, LIVENESS_SERVICE) == "SERVING"
        # Probes that fail keep it out.
        await asyncio.sleep(0.5)
        assert await status_of(address) == "NOT_SERVING"
        # The gateway stays in rotation (there is no other scheduler to send a caller to):
        # reads still work, and a Submit gets the scheduler's own reason.
        await asyncio.sleep(lost_after_s * 3)
        assert await status_of(gateway_address) == "SERVING"
        job = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=earlier), timeout=10)
        assert job.job_id == earlier
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Submit(request, timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "job store" in (raised.value.details() or ""), raised.value.details()
        store.refuse_inserts = False
        await until_status(address, "SERVING", timeout=5)
        assert await submit(mesh)
    finally:
        await stop_mesh(mesh)


async def test_state_changes_the_store_refuses_turn_readiness_off_until_they_land(
    tmp_path: Path, models_dir: Path
) -> None:
    store = DownStore(tmp_path / "jobs.sqlite3")
    mesh = await start_mesh(tmp_path, models_dir, [], store=store)
    address = f"127.0.0.1:{mesh.scheduler.port}"
    try:
        store.save_failures_left = 10**6
        await submit(mesh)  # inserted, then its QUEUED state is not written
        await until_status(address, "NOT_SERVING", timeout=5)
        assert await status_of(address, LIVENESS_SERVICE) == "SERVING"
        store.save_failures_left = 0
        await until_status(address, "SERVING", timeout=10)
    finally:
        await stop_mesh(mesh)
