"""The scheduler's DeleteJob: an ended job goes before its retention, with its result (file or
kept in the store), its record, its idempotency key and its pending webhook deliveries; an
unfinished one is refused, another tenant's is not found."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.scheduler.store.deliveries import DeliveryStatus
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.test_webhooks import hook_settings, stored_deliveries
from tests.webhook_receiver import Receiver, webhook_receiver


def deletions() -> float:
    """mediamesh_jobs_deleted_total of echo's queue, declared at 0 when the scheduler starts."""
    value = REGISTRY.get_sample_value("mediamesh_jobs_deleted_total", {"queue": "image"})
    assert value is not None
    return value


def scheduler_of(mesh: InProcessMesh) -> scheduler_pb2_grpc.SchedulerStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
    mesh.channels.append(channel)
    return scheduler_pb2_grpc.SchedulerStub(channel)


def scoped(job_id: str, tenant: str = "a", **fields: bool) -> scheduler_pb2.ScopedJobRequest:
    return scheduler_pb2.ScopedJobRequest(job_id=job_id, tenant=tenant, **fields)


async def ended_job(
    scheduler: scheduler_pb2_grpc.SchedulerStub, request: common_pb2.GenerateRequest
) -> str:
    """Submits for tenant a and follows the job to its end; its id."""
    events = [
        e
        async for e in scheduler.SubmitAndWatch(
            scheduler_pb2.SubmitRequest(request=request, tenant="a")
        )
    ]
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    return events[-1].job_id


async def code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


@pytest.fixture
async def mesh(tmp_path: Path, models_dir: Path, request) -> AsyncIterator[InProcessMesh]:
    """One echo worker; a flux-tiny job stays queued. `in_store_max_bytes` from the test's
    parameter when it has one (0: results as files)."""
    in_store = getattr(request, "param", 0)
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        scheduler={"artifacts": {"in_store_max_bytes": in_store}, "ended_jobs_in_memory": 2},
    )
    yield mesh
    await stop_mesh(mesh)


@pytest.mark.parametrize("mesh", [0, 256 * 1024], ids=["file", "in-store"], indirect=True)
async def test_an_ended_job_is_deleted_with_its_result_and_its_key_is_free(mesh):
    scheduler = scheduler_of(mesh)
    request = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="k1")
    job_id = await ended_job(scheduler, request)
    runtime = mesh.scheduler.runtime
    artifact = runtime.results[job_id]
    before = deletions()

    deleted = await scheduler.DeleteJob(scoped(job_id))

    assert (deleted.job_id, deleted.state) == (job_id, common_pb2.SUCCEEDED)
    assert deleted.result_bytes == artifact.size_bytes > 0
    assert deletions() == before + 1
    assert not await runtime.artifacts.exists(artifact.path)
    assert not Path(artifact.path).exists()
    assert not await runtime.store.has_result(job_id)
    assert await runtime.store.get(job_id) is None
    assert job_id not in mesh.core.jobs and job_id not in runtime.results
    for call in (scheduler.GetJob(scoped(job_id)), scheduler.DeleteJob(scoped(job_id))):
        assert (await code_of(call))[0] == grpc.StatusCode.NOT_FOUND
    listing = await scheduler.ListJobs(
        scheduler_pb2.ScopedListJobsRequest(query=gateway_pb2.ListJobsRequest(), tenant="a")
    )
    assert job_id not in [job.job_id for job in listing.jobs]
    again = await scheduler.Submit(scheduler_pb2.SubmitRequest(request=request, tenant="a"))
    assert not again.deduplicated and again.job_id != job_id


async def test_a_job_not_ended_is_refused_and_another_tenants_is_not_found(mesh):
    scheduler = scheduler_of(mesh)
    queued = await scheduler.Submit(
        scheduler_pb2.SubmitRequest(
            request=common_pb2.GenerateRequest(model="flux-tiny", prompt="x"), tenant="a"
        )
    )
    code, details = await code_of(scheduler.DeleteJob(scoped(queued.job_id)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details.startswith("job_id:") and "cancel it first" in details
    assert (await scheduler.GetJob(scoped(queued.job_id))).state == common_pb2.QUEUED

    await scheduler.Cancel(scoped(queued.job_id))
    code, _ = await code_of(scheduler.DeleteJob(scoped(queued.job_id, tenant="b")))
    assert code == grpc.StatusCode.NOT_FOUND
    deleted = await scheduler.DeleteJob(scoped(queued.job_id, tenant="ops", admin=True))
    assert (deleted.state, deleted.result_bytes) == (common_pb2.CANCELLED, 0)
    assert await mesh.scheduler.runtime.store.get(queued.job_id) is None


async def test_a_job_read_back_from_the_store_is_deleted_and_counts_stay_true(mesh):
    """Only two ended jobs stay in memory: the first of four is read from the store."""
    scheduler = scheduler_of(mesh)
    job_ids = [
        await ended_job(scheduler, common_pb2.GenerateRequest(model="echo", prompt=f"p{i}"))
        for i in range(4)
    ]
    runtime = mesh.scheduler.runtime
    await runtime.writer.flush(5.0)
    for _ in range(100):
        if job_ids[0] not in mesh.core.jobs:
            break
        await asyncio.sleep(0.05)
    assert job_ids[0] not in mesh.core.jobs

    deleted = await asyncio.gather(
        *(scheduler.DeleteJob(scoped(job_id)) for job_id in (job_ids[0], job_ids[3]))
    )

    assert [d.job_id for d in deleted] == [job_ids[0], job_ids[3]]
    listing = await scheduler.ListJobs(
        scheduler_pb2.ScopedListJobsRequest(query=gateway_pb2.ListJobsRequest(), tenant="a")
    )
    assert sorted(job.job_id for job in listing.jobs) == sorted(job_ids[1:3])
    assert await runtime.store.counts() == {"SUCCEEDED": 2}
    assert runtime.ended.counts_by_state() == {"SUCCEEDED": 2}


async def test_deleting_one_job_twice_at_once_deletes_it_once(mesh):
    scheduler = scheduler_of(mesh)
    job_id = await ended_job(scheduler, common_pb2.GenerateRequest(model="echo", prompt="x"))
    outcomes = await asyncio.gather(
        scheduler.DeleteJob(scoped(job_id)),
        scheduler.DeleteJob(scoped(job_id)),
        return_exceptions=True,
    )
    answered = [o for o in outcomes if isinstance(o, common_pb2.DeletedJob)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(answered) == 1 and answered[0].job_id == job_id
    assert [r.code() for r in refused] == [grpc.StatusCode.NOT_FOUND]


@pytest.fixture
async def failing_receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as receiver:
        receiver.default_status = 500
        yield receiver


async def test_pending_webhook_deliveries_stop_and_go_with_the_job(
    tmp_path: Path, models_dir: Path, failing_receiver: Receiver
):
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        webhooks=hook_settings(failing_receiver, max_attempts=50, secrets={"a": "whsec-a"}),
    )
    try:
        scheduler = scheduler_of(mesh)
        hook = common_pb2.Webhook(url=failing_receiver.url, events=["completed"])
        job_id = await ended_job(
            scheduler, common_pb2.GenerateRequest(model="echo", prompt="x", webhook=hook)
        )
        await failing_receiver.wait_for(2)
        await stored_deliveries(mesh, job_id, DeliveryStatus.PENDING)

        await scheduler.DeleteJob(scoped(job_id))

        runtime = mesh.scheduler.runtime
        assert await runtime.store.deliveries_of(job_id) == []
        attempts = len(failing_receiver.received)
        await asyncio.sleep(1.0)  # three backoffs of the settings above
        await runtime.writer.flush(5.0)
        assert len(failing_receiver.received) == attempts
        assert await runtime.store.deliveries_of(job_id) == []
    finally:
        await stop_mesh(mesh)


async def test_two_deletes_queued_together_answer_once_and_count_once(mesh):
    """Both calls reach the runtime before the store writer takes either (no suspension
    between them): one deletes, the other is NOT_FOUND, and the job's result bytes are
    taken off its tenant's count once."""
    scheduler = scheduler_of(mesh)
    kept = await ended_job(scheduler, common_pb2.GenerateRequest(model="echo", prompt="kept"))
    job_id = await ended_job(scheduler, common_pb2.GenerateRequest(model="echo", prompt="x"))
    runtime = mesh.scheduler.runtime
    held = runtime.result_usage.held("a")

    outcomes = await asyncio.gather(
        runtime.delete(job_id, "a"), runtime.delete(job_id, "a"), return_exceptions=True
    )

    assert [type(o).__name__ for o in outcomes] == ["PurgedJob", "NotFound"]
    assert runtime.result_usage.held("a") == held - outcomes[0].result_bytes > 0
    assert (await scheduler.GetJob(scoped(kept))).state == common_pb2.SUCCEEDED


async def test_a_caller_that_gives_up_does_not_stop_the_deletion_halfway(mesh):
    scheduler = scheduler_of(mesh)
    job_id = await ended_job(scheduler, common_pb2.GenerateRequest(model="echo", prompt="x"))
    runtime = mesh.scheduler.runtime
    artifact = runtime.results[job_id]

    call = asyncio.ensure_future(runtime.delete(job_id, "a"))
    await asyncio.sleep(0)  # the deletion is under way: queued with the store writer
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(100):
        if not await runtime.artifacts.exists(artifact.path):
            break
        await asyncio.sleep(0.02)

    assert not await runtime.artifacts.exists(artifact.path)
    assert job_id not in mesh.core.jobs and job_id not in runtime.results
    assert await runtime.store.get(job_id) is None
