"""Input files through a mesh: jobs naming one upload (or sending the same bytes) keep one
copy on disk, an ended job's inputs are gone, a padded image is refused before anything is
stored, and unfinished jobs sharing a copy still run after a scheduler restart."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.core.jobs import JobState
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.test_image_inputs import IMG2IMG, INLINE, noise_png, registry
from tests.unit.scheduler.test_input_size_limit import padded_png


async def start(tmp_path: Path, models_dir: Path, workers: list[list[str]]) -> InProcessMesh:
    return await start_mesh(
        tmp_path,
        models_dir,
        workers,
        scheduler={"inline_input_bytes": INLINE},
        registry=registry(),
    )


def inputs_folder(mesh: InProcessMesh) -> Path:
    return mesh.config.scheduler.artifact_dir / "inputs"


def on_disk(folder: Path) -> tuple[int, int, int]:
    """(names, distinct files by inode, their bytes) under `folder`."""
    names, inodes = 0, {}
    for path in folder.rglob("*") if folder.exists() else []:
        if path.is_file():
            names += 1
            stat = path.stat()
            inodes[stat.st_ino] = stat.st_size
    return names, len(inodes), sum(inodes.values())


async def upload(mesh: InProcessMesh, data: bytes) -> str:
    async def chunks() -> AsyncIterator[gateway_pb2.UploadChunk]:
        for start in range(0, len(data), 1 << 20):
            first = {"sha256": hashlib.sha256(data).hexdigest()} if not start else {}
            yield gateway_pb2.UploadChunk(data=data[start : start + (1 << 20)], **first)

    handle = await mesh.gateway_stub().Upload(chunks(), timeout=30)
    return handle.input_id


def request(seed: int, **image: object) -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(model=IMG2IMG, prompt="a red fox", seed=seed, **image)  # type: ignore[arg-type]


@pytest.fixture
async def queue_only(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    # No worker: jobs are accepted, stored with their inputs, and wait.
    mesh = await start(tmp_path, models_dir, [])
    yield mesh
    await stop_mesh(mesh)


async def test_jobs_sharing_an_upload_or_bytes_keep_one_copy_and_none_once_ended(
    queue_only: InProcessMesh,
) -> None:
    mesh, stub = queue_only, queue_only.gateway_stub()
    data = noise_png((128, 128), seed=3)
    assert len(data) > INLINE
    input_id = await upload(mesh, data)
    handles = [await stub.Submit(request(n, image_id=input_id), timeout=30) for n in range(10)]
    handles += [await stub.Submit(request(n, image=data), timeout=30) for n in range(10, 13)]
    names, copies, size = on_disk(inputs_folder(mesh))
    assert (copies, size) == (1, len(data)), "one copy, however many jobs use it"
    assert names == 13 + 1  # each job's own link, and the copy's name

    for handle in handles:
        await stub.Cancel(gateway_pb2.CancelRequest(job_id=handle.job_id), timeout=30)
    assert await mesh.scheduler.runtime.writer.flush(5.0)
    assert on_disk(inputs_folder(mesh)) == (0, 0, 0)
    # The upload itself lives on until it expires: it is the caller's, not the jobs'.
    assert await stub.Submit(request(99, image_id=input_id), timeout=30)


async def test_padded_images_are_refused_naming_the_field_and_limit_and_stored_nowhere(
    queue_only: InProcessMesh,
) -> None:
    mesh, stub = queue_only, queue_only.gateway_stub()
    padded = padded_png((512, 512), 4 * 2**20)
    input_id = await upload(mesh, padded)
    cases = [
        ({"image_id": input_id}, f"image_id: {len(padded)} bytes for a 512x512 px image; "),
        ({"image": padded_png((64, 64), 2 * 2**20)}, "image: 2"),
    ]
    for fields, start in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Submit(request(1, **fields), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = caught.value.details() or ""
        assert details.startswith(start), details
        assert "the limit is" in details and "8 bytes a pixel" in details
    assert not mesh.core.jobs
    assert on_disk(inputs_folder(mesh)) == (0, 0, 0)


async def result_of(mesh: InProcessMesh, job_id: str) -> common_pb2.GenerateEvent:
    watch = mesh.gateway_stub().Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=120)
    return [e async for e in watch][-1]


async def test_unfinished_jobs_sharing_a_copy_run_after_a_restart_and_leave_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    data = noise_png((64, 64), seed=11)
    mesh = await start(tmp_path, models_dir, [])
    try:
        stub = mesh.gateway_stub()
        job_ids = [(await stub.Submit(request(n, image=data), timeout=30)).job_id for n in range(3)]
        # One ends before the restart: its link goes, the copy stays for the other two.
        await stub.Cancel(gateway_pb2.CancelRequest(job_id=job_ids[0]), timeout=30)
        assert await mesh.scheduler.runtime.writer.flush(5.0)
        assert on_disk(inputs_folder(mesh)) == (3, 1, len(data))
    finally:
        await stop_mesh(mesh)

    mesh = await start(tmp_path, models_dir, [[IMG2IMG]])
    try:
        assert mesh.core.jobs[job_ids[0]].state is JobState.CANCELLED
        ends = await asyncio.gather(*(result_of(mesh, j) for j in job_ids[1:]))
        assert [e.state for e in ends] == [common_pb2.SUCCEEDED] * 2, ends
        assert await mesh.scheduler.runtime.writer.flush(5.0)
        assert on_disk(inputs_folder(mesh)) == (0, 0, 0)
    finally:
        await stop_mesh(mesh)
