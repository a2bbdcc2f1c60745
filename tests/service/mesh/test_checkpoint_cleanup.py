"""Every checkpoint a job left is deleted when it ends (issue 13, item 7).

Before, the scheduler deleted only the last checkpoint it had heard of. A periodic
checkpoint written by an attempt whose worker was lost, which the next attempt resumed
from, stayed on disk until the retention sweep (24 h by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from mediamesh.common.checkpoint_files import checkpoint_file
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.work import JobCheckpointed, JobFinished, JobParams, StepDone, WorkerEvent
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.core.units import WorkerInfo
from tests.service.conftest import start_mesh, stop_mesh

STEPS = 8


class CheckpointingWorker:
    """A worker link that handles checkpoint files as a real worker does: a periodic
    checkpoint every 2 steps replaces the previous one, and a finished job's last periodic
    checkpoint is deleted. Its first attempt is lost after step 4."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.attempts: list[str | None] = []

    async def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: object
    ) -> AsyncIterator[list[WorkerEvent]]:
        (job,) = jobs
        self.attempts.append(job.resume_checkpoint)
        first = len(self.attempts) == 1
        start = int(job.resume_checkpoint.rsplit("step", 1)[1][:-3]) if job.resume_checkpoint else 0
        previous: Path | None = None
        for step in range(start + 1, STEPS + 1):
            yield [StepDone(job.job_id, step, STEPS, 0.001)]
            if step < STEPS and step % job.checkpoint_every_steps == 0:
                path = checkpoint_file(self.folder, job.job_id, step)
                path.write_bytes(b"latents")
                if previous is not None:
                    previous.unlink()
                previous = path
                yield [JobCheckpointed(job.job_id, str(path), step)]
            if first and step == 4:
                raise ConnectionError("worker lost")
        if previous is not None:
            previous.unlink()
        yield [JobFinished(job.job_id, b"result", "image/png", 0)]

    def reset(self, address: str) -> None:
        return None

    async def cancel(self, address: str, job_ids: list[str]) -> None:
        return None

    async def close(self) -> None:
        return None


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_finished_job_leaves_no_checkpoint_of_any_attempt(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [],
        scheduler={"heartbeat_interval_s": 5.0, "checkpoint_every_steps": {"image": 2}},
    )
    try:
        runtime = mesh.scheduler.runtime
        folder = runtime.settings.artifact_dir / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        worker = runtime.batches.link = CheckpointingWorker(folder)
        runtime.register_worker(
            WorkerInfo("fake", "127.0.0.1:1", "on-demand", ("cpu",), frozenset({"flux-tiny"}))
        )
        request = common_pb2.GenerateRequest(model="flux-tiny", prompt="x", steps=STEPS)
        job_id = (await mesh.gateway_stub().Submit(request, timeout=10)).job_id
        await until(lambda: mesh.core.jobs[job_id].state is JobState.SUCCEEDED)
        # The second attempt resumed from the first one's step-4 checkpoint.
        assert worker.attempts == [None, str(checkpoint_file(folder, job_id, 4))]
        await until(lambda: not list(folder.iterdir()), timeout=5)
    finally:
        await stop_mesh(mesh)
