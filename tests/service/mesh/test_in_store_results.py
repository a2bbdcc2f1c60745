"""Small results kept in the scheduler's job store instead of as a file each: they reach
watchers and Download as before, outlive a restart, are copied to a bucket only when a URL
is wanted, and are purged (copy included) at retention."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.store.in_store_results import IN_STORE_PREFIX
from tests.s3_server import CREDENTIALS, S3Server, s3_server
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


async def generate(mesh: InProcessMesh, **fields: object) -> common_pb2.GenerateEvent:
    request = common_pb2.GenerateRequest(model="echo", prompt="kept", **fields)
    events = [e async for e in mesh.gateway_stub().Generate(request, timeout=60)]
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    return events[-1]


async def download(mesh: InProcessMesh, job_id: str) -> bytes:
    chunks = mesh.gateway_stub().Download(gateway_pb2.DownloadRequest(job_id=job_id))
    return b"".join([c.data async for c in chunks])


def kept_keys(s3: S3Server) -> list[str]:
    """This test's objects: moto's state outlives each server, so others' are there too."""
    return [key for key in s3.object_keys() if key.startswith("kept/")]


def result_files(mesh: InProcessMesh, job_id: str) -> list[Path]:
    return list(Path(mesh.config.scheduler.artifact_dir).rglob(f"{job_id}*"))


async def test_a_small_result_lives_in_the_job_store_and_outlives_a_restart(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        event = await generate(mesh)
        job_id, data = event.job_id, event.result.data
        assert data[:4] == b"\x89PNG"
        assert mesh.scheduler.runtime.results[job_id].path.startswith(IN_STORE_PREFIX)
        assert result_files(mesh, job_id) == []
        assert await download(mesh, job_id) == data
    finally:
        await stop_mesh(mesh)

    # The same store, no worker: the result is read back from SQLite.
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        watch = mesh.gateway_stub().Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=30)
        replay = [e async for e in watch]
        assert replay[-1].result.data == data
        assert await download(mesh, job_id) == data
        assert await mesh.scheduler.runtime.store.read_result(job_id) == data
    finally:
        await stop_mesh(mesh)


async def test_results_over_the_limit_are_files_as_before(tmp_path: Path, models_dir: Path) -> None:
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], scheduler={"artifacts": {"in_store_max_bytes": 16}}
    )
    try:
        event = await generate(mesh)
        assert len(event.result.data) > 16
        (file,) = result_files(mesh, event.job_id)
        assert file.read_bytes() == event.result.data
        assert not await mesh.scheduler.runtime.store.has_result(event.job_id)
    finally:
        await stop_mesh(mesh)


async def test_with_s3_a_kept_result_is_copied_for_its_url_once_and_purged_with_its_job(
    tmp_path: Path, models_dir: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    settings = {**s3.artifact_settings(prefix="kept"), "in_store_max_bytes": 256 * 1024}
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], scheduler={"artifacts": settings, "retention_s": 2.0}
    )
    try:
        plain = await generate(mesh)
        asked = await generate(mesh, result_as_url=True)
        key = f"kept/{asked.job_id}.png"
        # Only the result wanted as a URL went to the bucket.
        assert plain.result.data and kept_keys(s3) == [key]
        async with httpx.AsyncClient() as client:
            fetched = await client.get(asked.result.url)
        assert fetched.status_code == 200 and fetched.content == await download(mesh, asked.job_id)
        # Asking again signs the same object; no second upload under another name.
        again = gateway_pb2.WatchRequest(job_id=asked.job_id)
        replay = [e async for e in mesh.gateway_stub().Watch(again, timeout=30)]
        assert replay[-1].result.url and kept_keys(s3) == [key]
        store = mesh.scheduler.runtime.store
        assert await store.result_copied_to(asked.job_id) == f"{asked.job_id}.png"

        for _ in range(100):
            if asked.job_id not in mesh.core.jobs:
                break
            await asyncio.sleep(0.1)
        assert asked.job_id not in mesh.core.jobs
        assert kept_keys(s3) == []
        assert not await store.has_result(asked.job_id)
        assert await store.result_copied_to(asked.job_id) is None
    finally:
        await stop_mesh(mesh)
