"""Health answers what readiness needs to know, instead of SERVING from start to end:
a draining worker and a gateway that lost its scheduler report NOT_SERVING."""

from __future__ import annotations

import asyncio

import grpc

from bench.launcher import free_port
from mediamesh.common.api.health import LIVENESS_SERVICE, serving_status
from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, MeshConfig, SchedulerSettings
from mediamesh.gateway.main import start_gateway
from mediamesh.scheduler.main import start_scheduler
from tests.service.conftest import start_mesh, stop_mesh

LOST_AFTER_S = 1.0


async def status_of(address: str, service: str = "") -> str:
    """The health status through the api layer's client (blocking, so in a thread)."""
    try:
        return await asyncio.to_thread(serving_status, address, service, 2.0)
    except grpc.RpcError as exc:
        return f"no answer: {exc.code().name}"


async def until_status(address: str, wanted: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (status := await status_of(address)) != wanted:
        assert asyncio.get_running_loop().time() < deadline, f"{address} still {status}"
        await asyncio.sleep(0.1)


async def test_a_draining_worker_reports_not_serving(tmp_path, models_dir) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    channel = None
    try:
        (worker,) = mesh.workers
        address = f"127.0.0.1:{worker.port}"
        assert await status_of(address) == "SERVING"
        channel = grpc.aio.insecure_channel(address)
        stub = worker_pb2_grpc.WorkerStub(channel)
        await stub.Drain(worker_pb2.DrainRequest(grace_s=0, exit=False), timeout=10)
        await until_status(address, "NOT_SERVING", timeout=5)
        # Out of rotation, not dead: liveness must not restart it mid-drain.
        assert await status_of(address, LIVENESS_SERVICE) == "SERVING"
        # Draining is not leaving: the worker still answers its callers.
        status = await stub.Status(worker_pb2.WorkerStatusRequest(), timeout=5)
        assert status.draining
    finally:
        if channel is not None:
            await channel.close()
        await stop_mesh(mesh)


async def test_a_gateway_that_lost_its_scheduler_reports_not_serving_until_it_is_back(
    tmp_path,
) -> None:
    scheduler_port = free_port()
    config = MeshConfig(
        scheduler=SchedulerSettings(
            port=scheduler_port,
            metrics_port=None,
            store_path=tmp_path / "jobs.sqlite3",
            artifact_dir=tmp_path / "artifacts",
        ),
        gateway=GatewaySettings(
            port=0,
            metrics_port=None,
            http_port=None,
            scheduler_address=f"127.0.0.1:{scheduler_port}",
            scheduler_lost_after_s=LOST_AFTER_S,
        ),
        workers=[],
    )
    registry = load_registry()
    scheduler = await start_scheduler(config, registry)
    gateway = await start_gateway(config, registry)
    address = f"127.0.0.1:{gateway.port}"
    try:
        assert await status_of(address) == "SERVING"

        await scheduler.stop(0.5)
        await until_status(address, "NOT_SERVING", timeout=LOST_AFTER_S + 10)
        assert await status_of(address, LIVENESS_SERVICE) == "SERVING"

        scheduler = await start_scheduler(config, registry)
        await until_status(address, "SERVING", timeout=20)
    finally:
        await gateway.stop(0.5)
        await scheduler.stop(0.5)
