"""Ended jobs beyond `scheduler.ended_jobs_in_memory` leave the scheduler's memory once their
end is stored, and every read still finds them, from the job store: GetJob, Watch, Download,
Cancel, ListJobs pages across memory and store, an idempotent retry, and the job counts;
a restart loads only the newest ended jobs and lists the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from tests.service.conftest import InProcessMesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, echo_mesh_holding

HELD = 2


async def _mesh(tmp_path: Path, models_dir: Path, held: int = HELD) -> InProcessMesh:
    return await echo_mesh_holding(tmp_path, models_dir, held)


@pytest.fixture
async def mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await _mesh(tmp_path, models_dir)
    yield mesh
    await stop_mesh(mesh)


def echo(prompt: str, key: str = "") -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(model="echo", prompt=prompt, idempotency_key=key)


async def _run(mesh: InProcessMesh, request: common_pb2.GenerateRequest, api_key: str):
    events = [e async for e in mesh.gateway_stub().Generate(request, metadata=auth(api_key))]
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    return events[-1]


async def _until_dropped(mesh: InProcessMesh, job_ids: list[str]) -> None:
    for _ in range(200):
        if not any(job_id in mesh.core.jobs for job_id in job_ids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the oldest ended jobs stayed in memory")


async def _listed(mesh: InProcessMesh, api_key: str, page_size: int, **query) -> list[list[str]]:
    """Every page of the caller's listing, as job ids."""
    stub, pages, after = mesh.gateway_stub(), [], ""
    while True:
        request = gateway_pb2.ListJobsRequest(page_size=page_size, after_job_id=after, **query)
        page = await stub.ListJobs(request, metadata=auth(api_key))
        pages.append([job.job_id for job in page.jobs])
        if not page.has_more:
            return pages
        after = page.jobs[-1].job_id


async def test_every_read_finds_ended_jobs_no_longer_in_memory(mesh: InProcessMesh):
    stub = mesh.gateway_stub()
    first = await _run(mesh, echo("p0", key="k0"), KEY_A)
    info_then = await stub.GetJob(
        gateway_pb2.GetJobRequest(job_id=first.job_id), metadata=auth(KEY_A)
    )
    mine = [first.job_id] + [(await _run(mesh, echo(f"p{i}"), KEY_A)).job_id for i in range(1, 5)]
    theirs = (await _run(mesh, echo("b0"), KEY_B)).job_id
    await _until_dropped(mesh, mine[:3])
    assert mesh.scheduler.runtime.ended.held == HELD
    for _ in range(100):  # the gauges are set every 0.2 s
        if REGISTRY.get_sample_value("mediamesh_ended_jobs_in_memory") == HELD:
            break
        await asyncio.sleep(0.02)
    assert REGISTRY.get_sample_value("mediamesh_ended_jobs_in_memory") == HELD

    # GetJob: the same answer as while it was in memory.
    info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=first.job_id), metadata=auth(KEY_A))
    assert info == info_then and info.state == common_pb2.SUCCEEDED
    # Watch: the final event, its result inline as before.
    watched = [
        e
        async for e in stub.Watch(
            gateway_pb2.WatchRequest(job_id=first.job_id), metadata=auth(KEY_A)
        )
    ]
    assert len(watched) == 1 and watched[0].result.data == first.result.data
    # Download: the same bytes.
    chunks = [
        c.data
        async for c in stub.Download(
            gateway_pb2.DownloadRequest(job_id=first.job_id), metadata=auth(KEY_A)
        )
    ]
    assert b"".join(chunks) == first.result.data
    # Cancel: an ended job is answered as it stands.
    cancelled = await stub.Cancel(
        gateway_pb2.CancelRequest(job_id=first.job_id), metadata=auth(KEY_A)
    )
    assert cancelled.state == common_pb2.SUCCEEDED
    # Another tenant's dropped job stays invisible.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetJob(gateway_pb2.GetJobRequest(job_id=theirs), metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND

    # Listings page across memory (the newest) and the store (the rest), in order.
    assert await _listed(mesh, KEY_A, 2) == [mine[:2:-1], mine[2:0:-1], mine[:1]]
    assert await _listed(mesh, KEY_A, 3, oldest_first=True) == [mine[:3], mine[3:]]
    assert await _listed(mesh, KEY_A, 10, states=[common_pb2.FAILED]) == [[]]
    assert await _listed(mesh, KEY_B, 10) == [[theirs]]

    # An idempotent retry finds the dropped job; another request under its key is refused.
    again = await _run(mesh, echo("p0", key="k0"), KEY_A)
    assert again.job_id == first.job_id and again.result.data == first.result.data
    # Whatever a new job would meet now: a deadline no new job could make.
    hurried = echo("p0", key="k0")
    hurried.timeout_ms = 1
    handle = await stub.Submit(hurried, metadata=auth(KEY_A))
    assert handle.job_id == first.job_id
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _run(mesh, echo("other", key="k0"), KEY_A)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "prompt" in (caught.value.details() or "")
    # The store's health is untouched by the duplicate key.
    assert not mesh.scheduler.runtime.store_health.failing

    assert mesh.scheduler.runtime.ended.counts_by_state() == {"SUCCEEDED": 6}


async def test_a_restart_loads_the_newest_ended_jobs_and_lists_them_all(
    tmp_path: Path, models_dir: Path
):
    mesh = await _mesh(tmp_path, models_dir, held=100)
    try:
        mine = [(await _run(mesh, echo(f"p{i}"), KEY_A)).job_id for i in range(5)]
        before = await _listed(mesh, KEY_A, 2)
    finally:
        await stop_mesh(mesh)
    mesh = await _mesh(tmp_path, models_dir, held=1)
    try:
        ended = [job_id for job_id in mine if job_id in mesh.core.jobs]
        assert ended == mine[-1:]
        assert await _listed(mesh, KEY_A, 2) == before == [mine[:2:-1], mine[2:0:-1], mine[:1]]
        info = await mesh.gateway_stub().GetJob(
            gateway_pb2.GetJobRequest(job_id=mine[0]), metadata=auth(KEY_A)
        )
        assert info.state == common_pb2.SUCCEEDED
        assert mesh.scheduler.runtime.ended.counts_by_state() == {"SUCCEEDED": 5}
    finally:
        await stop_mesh(mesh)
