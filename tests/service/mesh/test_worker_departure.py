"""A worker that leaves takes its scheduler-side leftovers with it: its
`mediamesh_device_load` series and the scheduler's channel to it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
from prometheus_client import REGISTRY, generate_latest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import WorkerSettings
from mediamesh.worker.main import start_worker
from tests.service.conftest import start_mesh, stop_mesh

WORKER_ID = "departing-worker"


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def load_series() -> list[str]:
    """This worker's device-load lines as /metrics serves them."""
    text = generate_latest(REGISTRY).decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith("mediamesh_device_load{") and f'worker="{WORKER_ID}"' in line
    ]


async def test_a_departed_worker_leaves_no_series_and_no_channel(tmp_path, models_dir) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        settings = WorkerSettings(
            worker_id=WORKER_ID,
            port=0,
            metrics_port=None,
            scheduler_address=f"127.0.0.1:{mesh.scheduler.port}",
            models=["echo"],
            checkpoint_dir=tmp_path / "checkpoints",
        )
        worker = await start_worker(mesh.config, load_registry(), settings)
        mesh.workers.append(worker)
        await until(lambda: WORKER_ID in mesh.core.units)
        # A finished job: the scheduler now holds a channel to the worker.
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="x")
        job_id = (await stub.Submit(request, timeout=10)).job_id
        async for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=20):
            last = event
        assert last.state == common_pb2.SUCCEEDED
        link = mesh.scheduler.runtime.link
        address = mesh.core.units[WORKER_ID].info.address
        channel = link._channels[address]
        await until(lambda: bool(load_series()))

        await worker.stop()
        mesh.workers.remove(worker)
        await until(lambda: WORKER_ID not in mesh.core.units)

        await until(lambda: channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN)
        assert address not in link._channels
        # Two ticks of the dispatch loop, which publishes the gauges, must not bring it back.
        await asyncio.sleep(2 * mesh.config.scheduler.heartbeat_interval_s)
        assert load_series() == []
    finally:
        await stop_mesh(mesh)
