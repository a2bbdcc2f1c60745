"""No tenant name means "every tenant": seeing other tenants' jobs takes the admin scope, which
only a credential carries (an API key's `scopes: [admin]`, then the gateway's internal call)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.gateway.core.tenancy import hash_key
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed

ADMIN_KEY = "key-of-the-operators"


@pytest.fixture
async def admin_mesh(tmp_path: Path, models_dir: Path):
    """Tenants a and b, an admin key of tenant ops; the one worker hosts echo only, so a
    flux-tiny job stays queued."""
    gateway = keyed()
    gateway["api_keys"].append(
        {"sha256": hash_key(ADMIN_KEY), "tenant": "ops", "scopes": ["admin"]}
    )
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=gateway)
    yield mesh
    await stop_mesh(mesh)


async def _drain(stream) -> list:
    return [item async for item in stream]


async def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def test_only_the_admin_scope_reaches_another_tenants_jobs(admin_mesh):
    stub = admin_mesh.gateway_stub()
    done = await stub.Submit(
        common_pb2.GenerateRequest(model="echo", prompt="x"), metadata=auth(KEY_A)
    )
    await _drain(stub.Watch(gateway_pb2.WatchRequest(job_id=done.job_id), metadata=auth(KEY_A)))
    queued = await stub.Submit(
        common_pb2.GenerateRequest(model="flux-tiny", prompt="x"), metadata=auth(KEY_A)
    )

    def calls(key: str) -> list:
        metadata = auth(key)
        return [
            stub.GetJob(gateway_pb2.GetJobRequest(job_id=done.job_id), metadata=metadata),
            _drain(stub.Watch(gateway_pb2.WatchRequest(job_id=done.job_id), metadata=metadata)),
            _drain(
                stub.Download(gateway_pb2.DownloadRequest(job_id=done.job_id), metadata=metadata)
            ),
            stub.Cancel(gateway_pb2.CancelRequest(job_id=queued.job_id), metadata=metadata),
        ]

    for call in calls(KEY_B):
        assert await _code(call) == grpc.StatusCode.NOT_FOUND
    info, events, chunks, cancelled = [await call for call in calls(ADMIN_KEY)]
    assert (info.tenant, info.state) == ("a", common_pb2.SUCCEEDED)
    assert events[-1].state == common_pb2.SUCCEEDED
    assert chunks and chunks[0].total_size == sum(len(c.data) for c in chunks) > 0
    assert (cancelled.tenant, cancelled.state) == ("a", common_pb2.CANCELLED)
    # Deleting is scoped the same way: another tenant's key finds no job, an admin's does.
    delete = gateway_pb2.DeleteJobRequest(job_id=done.job_id)
    assert await _code(stub.DeleteJob(delete, metadata=auth(KEY_B))) == grpc.StatusCode.NOT_FOUND
    deleted = await stub.DeleteJob(delete, metadata=auth(ADMIN_KEY))
    assert (deleted.job_id, deleted.state) == (done.job_id, common_pb2.SUCCEEDED)
    assert deleted.result_bytes == sum(len(c.data) for c in chunks)
    lookup = stub.GetJob(gateway_pb2.GetJobRequest(job_id=done.job_id), metadata=auth(KEY_A))
    assert await _code(lookup) == grpc.StatusCode.NOT_FOUND


async def test_the_scheduler_reads_an_empty_tenant_as_no_tenant(keyed_mesh):
    stub = keyed_mesh.gateway_stub()
    handle = await stub.Submit(
        common_pb2.GenerateRequest(model="echo", prompt="x"), metadata=auth(KEY_A)
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{keyed_mesh.scheduler.port}")
    keyed_mesh.channels.append(channel)
    scheduler = scheduler_pb2_grpc.SchedulerStub(channel)
    for tenant in ("", "A", "a b", "-a"):
        request = scheduler_pb2.ScopedJobRequest(job_id=handle.job_id, tenant=tenant)
        assert await _code(scheduler.GetJob(request)) == grpc.StatusCode.INVALID_ARGUMENT
        assert await _code(scheduler.Cancel(request)) == grpc.StatusCode.INVALID_ARGUMENT
        submit = scheduler_pb2.SubmitRequest(
            request=common_pb2.GenerateRequest(model="echo", prompt="x"), tenant=tenant
        )
        assert await _code(scheduler.Submit(submit)) == grpc.StatusCode.INVALID_ARGUMENT
    other = scheduler_pb2.ScopedJobRequest(job_id=handle.job_id, tenant="b")
    assert await _code(scheduler.GetJob(other)) == grpc.StatusCode.NOT_FOUND
    admin = scheduler_pb2.ScopedJobRequest(job_id=handle.job_id, tenant="ops", admin=True)
    assert (await scheduler.GetJob(admin)).tenant == "a"
    assert len(keyed_mesh.core.jobs) == 1  # no submit with a bad tenant was accepted
