"""A batch that cannot reach its worker loses no job: found by the recovery benchmark, where
a worker restarted on its old port behind the scheduler's backing-off channel and its jobs
used up their retries in milliseconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from bench.launcher import free_port
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import WorkerSettings
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.worker.main import start_worker
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


async def until(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def add_worker(mesh: InProcessMesh, tmp_path, worker_id: str, port: int = 0):
    settings = WorkerSettings(
        worker_id=worker_id,
        port=port,
        metrics_port=None,
        scheduler_address=f"127.0.0.1:{mesh.scheduler.port}",
        models=["echo"],
        checkpoint_dir=tmp_path / "checkpoints",
        drain_grace_s=5,
    )
    worker = await start_worker(mesh.config, load_registry(), settings)
    mesh.workers.append(worker)
    await until(lambda: worker_id in mesh.core.units)
    return worker


async def result_state(mesh: InProcessMesh, job_id: str) -> str:
    stub = mesh.gateway_stub()
    async for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=30):
        if event.WhichOneof("event") in ("result", "error"):
            return common_pb2.JobState.Name(event.state)
    return "NO_RESULT"


async def test_a_job_sent_to_an_unreachable_worker_waits_for_a_reachable_one(
    tmp_path, models_dir
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [])
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
    try:
        heartbeats: asyncio.Queue[scheduler_pb2.WorkerMessage] = asyncio.Queue()

        async def ghost() -> AsyncIterator[scheduler_pb2.WorkerMessage]:
            # Registers an address nothing listens on, as a worker behind a broken route.
            yield scheduler_pb2.WorkerMessage(
                register=scheduler_pb2.WorkerRegistration(
                    worker_id="ghost",
                    address=f"127.0.0.1:{free_port()}",
                    models=[scheduler_pb2.HostedModel(name="echo")],
                )
            )
            while True:
                yield await heartbeats.get()

        session = scheduler_pb2_grpc.SchedulerStub(channel).Attach(ghost())
        assert (await session.read()).registered
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="x")
        job_id = (await stub.Submit(request, timeout=10)).job_id
        await until(lambda: "ghost" not in mesh.core.units)
        job = mesh.core.jobs[job_id]
        assert job.state is JobState.QUEUED and job.at_front and job.worker_losses == 0
        assert job.attempts >= 1
        # Its next heartbeat is refused, which makes a real worker's session register again.
        await heartbeats.put(scheduler_pb2.WorkerMessage(heartbeat=scheduler_pb2.WorkerHeartbeat()))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await session.read()
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "register again" in refused.value.details()
        await add_worker(mesh, tmp_path, "w0")
        assert await result_state(mesh, job_id) == "SUCCEEDED"
        assert mesh.core.jobs[job_id].worker_losses == 0
    finally:
        await channel.close()
        await stop_mesh(mesh)


async def test_jobs_survive_a_worker_restarting_on_its_old_port(tmp_path, models_dir) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        port = free_port()
        first = await add_worker(mesh, tmp_path, "w0", port)
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="warm the channel up")
        assert await result_state(mesh, (await stub.Submit(request, timeout=10)).job_id) == (
            "SUCCEEDED"
        )
        await first.stop()
        mesh.workers.remove(first)
        await until(lambda: "w0" not in mesh.core.units)
        # Long enough for the scheduler's channel to the dead port to be backing off.
        await asyncio.sleep(1.5)
        await add_worker(mesh, tmp_path, "w0", port)
        ids = [
            (await stub.Submit(common_pb2.GenerateRequest(model="echo", prompt=f"{i}"))).job_id
            for i in range(4)
        ]
        states = await asyncio.gather(*(result_state(mesh, job_id) for job_id in ids))
        assert states == ["SUCCEEDED"] * 4
        assert all(mesh.core.jobs[j].worker_losses == 0 for j in ids)
    finally:
        await stop_mesh(mesh)
