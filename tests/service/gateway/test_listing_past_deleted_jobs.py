"""ListJobs pages continue past a cursor job deleted since the previous page (DeleteJob, as
`mediamesh batch --delete-results` does to every job): from where it stood, newest or oldest
first, whether the jobs are in memory or read back from the store, after a restart too;
another tenant naming that id as a cursor is refused as for an id that never existed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import gateway_pb2
from tests.service.conftest import InProcessMesh, stop_mesh
from tests.service.gateway.conftest import (
    KEY_A,
    KEY_B,
    auth,
    echo_mesh_holding,
    finished_echo_jobs,
)


async def _until_held(mesh: InProcessMesh, job_ids: list[str], held: int) -> None:
    for _ in range(200):
        if sum(job_id in mesh.core.jobs for job_id in job_ids) <= held:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the oldest ended jobs stayed in memory")


async def _page(
    mesh: InProcessMesh, api_key: str, after: str = "", oldest_first: bool = False
) -> tuple[list[str], bool]:
    request = gateway_pb2.ListJobsRequest(
        page_size=2, after_job_id=after, oldest_first=oldest_first
    )
    page = await mesh.gateway_stub().ListJobs(request, metadata=auth(api_key))
    return [job.job_id for job in page.jobs], page.has_more


async def _delete(mesh: InProcessMesh, job_id: str) -> None:
    request = gateway_pb2.DeleteJobRequest(job_id=job_id)
    await mesh.gateway_stub().DeleteJob(request, metadata=auth(KEY_A))


async def _refusal(mesh: InProcessMesh, api_key: str, after: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _page(mesh, api_key, after)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return (caught.value.details() or "").replace(after, "ID")


@pytest.mark.parametrize("held", [100, 1], ids=["in-memory", "from-store"])
async def test_the_next_page_starts_where_the_deleted_cursor_job_stood(
    tmp_path: Path, models_dir: Path, held: int
):
    mesh = await echo_mesh_holding(tmp_path, models_dir, held)
    try:
        mine = await finished_echo_jobs(mesh, KEY_A, 6)
        await finished_echo_jobs(mesh, KEY_B, 1)
        await _until_held(mesh, mine, held)

        newest, _ = await _page(mesh, KEY_A)
        assert newest == [mine[5], mine[4]]
        await _delete(mesh, mine[4])
        assert await _page(mesh, KEY_A, after=mine[4]) == ([mine[3], mine[2]], True)

        oldest, _ = await _page(mesh, KEY_A, oldest_first=True)
        assert oldest == [mine[0], mine[1]]
        await _delete(mesh, mine[1])
        assert await _page(mesh, KEY_A, mine[1], oldest_first=True) == ([mine[2], mine[3]], True)

        # Another tenant learns nothing of the deleted job: the words for an unknown id.
        never = await _refusal(mesh, KEY_B, "0" * 32)
        assert await _refusal(mesh, KEY_B, mine[4]) == never
        assert never.startswith("after_job_id: no job 'ID'")
    finally:
        await stop_mesh(mesh)

    # The place of a deleted job is kept in the store, so it outlives a restart.
    mesh = await echo_mesh_holding(tmp_path, models_dir, held)
    try:
        assert await _page(mesh, KEY_A, after=mine[4]) == ([mine[3], mine[2]], True)
        assert await _page(mesh, KEY_A, mine[1], oldest_first=True) == ([mine[2], mine[3]], True)
        assert await _refusal(mesh, KEY_B, mine[4]) == never
    finally:
        await stop_mesh(mesh)
