"""A restarted scheduler keeps the input images of the jobs it had queued: the one stored
inline in the job's row and the one beyond the inline size in the artifact store's inputs
folder. Both jobs run after the restart and give what the same requests give on a fresh
mesh, so the inputs that reached the worker are the ones that were sent."""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.core.jobs import JobState
from tests.input_media import image_bytes
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.test_image_inputs import IMG2IMG, INLINE, noise_png, registry


def requests() -> list[common_pb2.GenerateRequest]:
    # Different sizes, so the two never share a batch: batched and alone may differ by a
    # rounding step, and the fresh mesh runs them one at a time.
    small = image_bytes((48, 48), color=(30, 160, 60))
    large = noise_png((64, 64), seed=9)
    assert len(small) <= INLINE < len(large)
    return [
        common_pb2.GenerateRequest(
            model=IMG2IMG, prompt="a red fox", seed=5, image=small, strength=0.7
        ),
        common_pb2.GenerateRequest(model=IMG2IMG, prompt="a red fox", seed=6, image=large),
    ]


async def start(tmp_path: Path, models_dir: Path, workers: list[list[str]]) -> InProcessMesh:
    return await start_mesh(
        tmp_path,
        models_dir,
        workers,
        scheduler={"inline_input_bytes": INLINE},
        registry=registry(),
    )


async def result_of(mesh: InProcessMesh, job_id: str) -> bytes:
    watch = mesh.gateway_stub().Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=120)
    events = [e async for e in watch]
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    return events[-1].result.data


async def test_queued_image_jobs_survive_a_scheduler_restart(
    tmp_path: Path, models_dir: Path
) -> None:
    # No worker: the jobs are accepted, stored with their inputs, and wait in the queue.
    mesh = await start(tmp_path, models_dir, [])
    try:
        stub = mesh.gateway_stub()
        job_ids = [(await stub.Submit(r, timeout=30)).job_id for r in requests()]
        store = mesh.scheduler.runtime.store
        stored = [await store.get(job_id) for job_id in job_ids]
        assert all(row is not None and row[0].state is JobState.QUEUED for row in stored)
        inline, in_file = (row[0].params.image for row in stored if row is not None)
        assert inline is not None and inline.ref.startswith("inline:")
        assert in_file is not None
        input_file = Path(in_file.ref)
        assert input_file.parent == mesh.config.scheduler.artifact_dir / "inputs"
        assert input_file.is_file()
    finally:
        await stop_mesh(mesh)
    assert input_file.is_file()  # a stop is not a retention purge

    # The same store and artifact folder, now with a worker.
    mesh = await start(tmp_path, models_dir, [[IMG2IMG]])
    try:
        restored = [mesh.core.jobs[job_id] for job_id in job_ids]
        assert [job.params.image for job in restored] == [inline, in_file]
        after_restart = [await result_of(mesh, job_id) for job_id in job_ids]
    finally:
        await stop_mesh(mesh)

    fresh_path = tmp_path / "fresh"
    fresh_path.mkdir()
    fresh = await start(fresh_path, models_dir, [[IMG2IMG]])
    try:
        stub = fresh.gateway_stub()
        on_fresh_mesh = []
        for request in requests():
            handle = await stub.Submit(request, timeout=30)
            on_fresh_mesh.append(await result_of(fresh, handle.job_id))
    finally:
        await stop_mesh(fresh)
    assert after_restart[0] != after_restart[1]
    assert after_restart == on_fresh_mesh
