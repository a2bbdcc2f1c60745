"""Gateway.DeleteJob: an ended job of the caller's is deleted with its result and is unknown
on every call afterwards, its idempotency key free again; a job that has not ended is
refused, naming it and what to do first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, auth, keyed


@pytest.fixture
async def echo_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    """Tenants a and b; the one worker hosts echo only, so a flux-tiny job stays queued."""
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=keyed())
    yield mesh
    await stop_mesh(mesh)


async def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def _drain(stream) -> list:
    return [item async for item in stream]


async def _ended_echo(stub: gateway_pb2_grpc.GatewayStub, key: str) -> gateway_pb2.JobHandle:
    request = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key=key)
    handle = await stub.Submit(request, metadata=auth(KEY_A))
    watch = gateway_pb2.WatchRequest(job_id=handle.job_id)
    events = await _drain(stub.Watch(watch, metadata=auth(KEY_A)))
    assert events[-1].state == common_pb2.SUCCEEDED
    return handle


async def test_an_ended_job_is_deleted_and_unknown_everywhere_after(echo_mesh):
    stub = echo_mesh.gateway_stub()
    handle = await _ended_echo(stub, "key-1")
    job_id, metadata = handle.job_id, auth(KEY_A)
    info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), metadata=metadata)
    assert info.result.artifact.size_bytes > 0

    deleted = await stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=job_id), metadata=metadata)
    assert (deleted.job_id, deleted.state, deleted.result_bytes) == (
        job_id,
        common_pb2.SUCCEEDED,
        info.result.artifact.size_bytes,
    )
    gone = [
        stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), metadata=metadata),
        _drain(stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), metadata=metadata)),
        _drain(stub.Download(gateway_pb2.DownloadRequest(job_id=job_id), metadata=metadata)),
        stub.Cancel(gateway_pb2.CancelRequest(job_id=job_id), metadata=metadata),
        stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=job_id), metadata=metadata),
    ]
    for call in gone:
        assert await _code(call) == grpc.StatusCode.NOT_FOUND
    listed = await stub.ListJobs(gateway_pb2.ListJobsRequest(), metadata=metadata)
    assert job_id not in [job.job_id for job in listed.jobs]
    # The key names no job any more: the same request makes a new one.
    again = await _ended_echo(stub, "key-1")
    assert again.job_id != job_id and not again.deduplicated


async def test_a_job_that_has_not_ended_is_refused_until_cancelled(echo_mesh):
    stub = echo_mesh.gateway_stub()
    metadata = auth(KEY_A)
    queued = await stub.Submit(
        common_pb2.GenerateRequest(model="flux-tiny", prompt="x"), metadata=metadata
    )
    delete = gateway_pb2.DeleteJobRequest(job_id=queued.job_id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.DeleteJob(delete, metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = caught.value.details() or ""
    assert details.startswith("job_id: ") and queued.job_id in details and "cancel" in details
    still = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=queued.job_id), metadata=metadata)
    assert still.state == common_pb2.QUEUED

    await stub.Cancel(gateway_pb2.CancelRequest(job_id=queued.job_id), metadata=metadata)
    deleted = await stub.DeleteJob(delete, metadata=metadata)
    assert (deleted.state, deleted.result_bytes) == (common_pb2.CANCELLED, 0)
