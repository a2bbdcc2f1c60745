"""A draining worker registers with the scheduler as draining, and nothing is routed to it.

Before, a worker whose devices were gone kept its session's reconnect loop: the scheduler
dropped it for the lost batch, its next heartbeat was refused, and 0.2 s later it registered
again. A registration said nothing of draining, so the requeued job went straight back to
it (attempt 2) and was lost a second time when the worker left: with max_attempts 2 it
FAILED for one lost worker. A worker draining to leave (SIGTERM) raced the same way when the
scheduler dropped its session. It must still register, though: only an attached worker can
have the scheduler confirm its last batches before it leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import WorkerSettings
from mediamesh.common.work import JobParams
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.core.units import WorkerInfo
from mediamesh.worker.core.batch import ControlView, DeviceGroupLost, Emit
from mediamesh.worker.main import start_worker
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh

# Longer than a heartbeat (0.5 s), the scheduler's refusal of it and the reconnect backoff.
REREGISTER_WINDOW_S = 1.5


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def record_registrations(
    mesh: InProcessMesh, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, bool]]:
    """Each registration the scheduler applies, with the draining state it applies with it
    (the heartbeat its registration handler records in the same step)."""
    applied: list[tuple[str, bool]] = []
    registering: list[str] = []
    runtime = mesh.scheduler.runtime
    register, beat = runtime.register_worker, runtime.worker_heartbeat

    def recording_register(info: WorkerInfo) -> None:
        registering.append(info.worker_id)
        register(info)

    def recording_beat(worker_id: str, draining: bool, *rest: Any, **options: Any) -> None:
        if registering:
            applied.append((registering.pop(), draining))
        beat(worker_id, draining, *rest, **options)

    monkeypatch.setattr(runtime, "register_worker", recording_register)
    monkeypatch.setattr(runtime, "worker_heartbeat", recording_beat)
    return applied


def echo_worker(mesh: InProcessMesh, tmp_path: Path) -> WorkerSettings:
    return WorkerSettings(
        worker_id="w1",
        port=0,
        metrics_port=None,
        scheduler_address=f"127.0.0.1:{mesh.scheduler.port}",
        models=["echo"],
        checkpoint_dir=tmp_path / "artifacts" / "checkpoints",
    )


def group_down(jobs: list[JobParams], control: ControlView, emit: Emit) -> None:
    # What a tensor- or context-parallel host raises once a helper rank has died.
    raise DeviceGroupLost("group of echo is down: rank 1 exited")


async def test_a_worker_that_lost_its_devices_registers_as_draining_and_gets_no_work(
    tmp_path, models_dir, monkeypatch
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], scheduler={"max_attempts": 2})
    try:
        (broken,) = mesh.workers
        registrations = record_registrations(mesh, monkeypatch)
        monkeypatch.setattr(broken.runtime.hosts["echo"], "run_batch", group_down)

        request = common_pb2.GenerateRequest(model="echo", prompt="fox", steps=2, seed=5)
        job_id = (await mesh.gateway_stub().Submit(request, timeout=10)).job_id
        job = mesh.core.jobs[job_id]
        await until(lambda: broken.exit_requested.is_set() and job.worker_losses == 1)
        await asyncio.sleep(REREGISTER_WINDOW_S)

        assert registrations and all(draining for _, draining in registrations), registrations
        assert mesh.core.units["w0"].draining
        assert job.state is JobState.QUEUED, (job.state, job.error_message)
        assert (job.attempts, job.worker_losses) == (1, 1)

        # Its supervisor's part (`mediamesh worker`): drain, leave, exit 1.
        await broken.drain_and_stop(5)
        mesh.workers.remove(broken)
        assert broken.exit_code == 1

        healthy = await start_worker(mesh.config, load_registry(), echo_worker(mesh, tmp_path))
        mesh.workers.append(healthy)
        await until(lambda: job.state.terminal)
        assert job.state is JobState.SUCCEEDED, (job.state, job.error_message)
        assert (job.worker_id, job.attempts, job.worker_losses) == ("w1", 2, 1)
    finally:
        await stop_mesh(mesh)


async def test_a_worker_draining_to_leave_registers_again_as_draining_when_dropped(
    tmp_path, models_dir, monkeypatch
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        (leaving,) = mesh.workers
        registrations = record_registrations(mesh, monkeypatch)
        # SIGTERM on a spot worker: it drains, its heartbeat says so.
        leaving.runtime.start_drain()
        await until(lambda: mesh.core.units["w0"].draining)
        # The scheduler drops its session meanwhile (it restarted, or heartbeats were late).
        runtime = mesh.scheduler.runtime
        runtime.worker_gone(mesh.core.units["w0"].info, "heartbeats stopped")
        await until(lambda: registrations != [])
        await until(leaving.session.registered.is_set)

        # Back, and draining from its registration on: a job waits for another worker.
        assert registrations == [("w0", True)]
        assert mesh.core.units["w0"].draining
        request = common_pb2.GenerateRequest(model="echo", prompt="fox", steps=2, seed=5)
        job_id = (await mesh.gateway_stub().Submit(request, timeout=10)).job_id
        await asyncio.sleep(REREGISTER_WINDOW_S)
        assert mesh.core.jobs[job_id].state is JobState.QUEUED
        await leaving.drain_and_stop(5)
        mesh.workers.remove(leaving)
        assert leaving.exit_code == 0
    finally:
        await stop_mesh(mesh)
