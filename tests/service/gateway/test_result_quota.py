"""A tenant's quota of stored result bytes: a tenant holding it is refused new jobs, naming
what it holds and the quota, until it deletes results; other tenants, retries under an
idempotency key and a restarted scheduler's count are unaffected."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.store.job_store import JobStore
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed


def refusals() -> float:
    return (
        REGISTRY.get_sample_value(
            "mediamesh_jobs_refused_total", {"queue": "image", "reason": "result_quota"}
        )
        or 0.0
    )


@pytest.fixture
async def quota_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    """Tenant a may hold one byte of results (one result puts it over); tenant b has no
    quota. No ended job stays in memory, so retries are answered from the store."""
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        gateway=keyed(a={"result_quota_bytes": 1}),
        scheduler={"ended_jobs_in_memory": 0},
    )
    yield mesh
    await stop_mesh(mesh)


def result_bytes(event: common_pb2.GenerateEvent) -> int:
    """The size of the event's result: echo's are small enough to come inline."""
    return len(event.result.data) or event.result.artifact.size_bytes


async def run_to_end(stub, key: str, **fields) -> common_pb2.GenerateEvent:
    request = common_pb2.GenerateRequest(model="echo", prompt="x", **fields)
    events = [e async for e in stub.Generate(request, metadata=auth(key))]
    return events[-1]


async def test_a_tenant_holding_its_quota_is_refused_until_it_deletes(quota_mesh):
    stub = quota_mesh.gateway_stub()
    first = await run_to_end(stub, KEY_A, idempotency_key="first")
    assert first.state == common_pb2.SUCCEEDED
    held = quota_mesh.scheduler.runtime.result_usage.held("a")
    assert held == result_bytes(first) > 0
    before = refusals()

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(
            common_pb2.GenerateRequest(model="echo", prompt="y"), metadata=auth(KEY_A)
        )

    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = caught.value.details() or ""
    assert details.startswith("result_quota_bytes:")
    assert f"holds {held} bytes" in details and "quota of 1" in details
    assert refusals() == before + 1
    # A retry of the job that made the quota full is still answered with it, from the store.
    again = await stub.Submit(
        common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="first"),
        metadata=auth(KEY_A),
    )
    assert (again.job_id, again.deduplicated) == (first.job_id, True)
    # Another tenant's results are its own.
    assert (await run_to_end(stub, KEY_B)).state == common_pb2.SUCCEEDED

    await stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=first.job_id), metadata=auth(KEY_A))

    assert quota_mesh.scheduler.runtime.result_usage.held("a") == 0
    assert (await run_to_end(stub, KEY_A)).state == common_pb2.SUCCEEDED


async def test_a_restarted_scheduler_counts_what_each_tenant_holds(
    tmp_path: Path, models_dir: Path
):
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=keyed())
    try:
        stub = mesh.gateway_stub()
        sizes = {
            "a": [result_bytes(await run_to_end(stub, KEY_A)) for _ in range(2)],
            "b": [result_bytes(await run_to_end(stub, KEY_B))],
        }
        await mesh.scheduler.runtime.writer.flush(5.0)
    finally:
        await stop_mesh(mesh)
    store = JobStore(tmp_path / "jobs.sqlite3")
    try:
        assert await store.result_bytes_by_tenant() == {t: sum(s) for t, s in sizes.items()}
    finally:
        await store.close()
    restarted = await start_mesh(tmp_path, models_dir, [], gateway=keyed())
    try:
        usage = restarted.scheduler.runtime.result_usage
        assert (usage.held("a"), usage.held("b")) == (sum(sizes["a"]), sum(sizes["b"]))
    finally:
        await stop_mesh(restarted)
