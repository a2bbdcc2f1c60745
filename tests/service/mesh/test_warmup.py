"""Warm-up: a worker runs its models' listed shapes before it takes work, and the mesh shows
it warming (ListModels, status, health) until then. A test hook holds the warm-up call."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc

from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.common.registry import ModelSpec, Registry, load_registry
from mediamesh.common.work import JobParams
from mediamesh.sdk.api.convert import model_info as sdk_model_info
from mediamesh.worker.core import call_hooks
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_health_follows_state import status_of

WARMUP = [{"width": 32, "height": 16, "steps": 2, "batch": 3}]


def registry_with_warmup() -> Registry:
    registry = load_registry()
    echo = registry.get("echo")
    assert echo is not None
    warmed = ModelSpec.model_validate({**echo.model_dump(), "warmup": WARMUP})
    return Registry(models=[warmed if m.name == "echo" else m for m in registry.models])


async def echo_info(mesh) -> common_pb2.ModelInfo:
    listing = await mesh.gateway_stub().ListModels(gateway_pb2.ListModelsRequest())
    (info,) = [m for m in listing.models if m.name == "echo"]
    return info


async def test_warmup_is_visible_before_ready(tmp_path: Path, models_dir: Path) -> None:
    release = threading.Event()
    calls: list[list[JobParams]] = []

    def hold_warmup(jobs: list[JobParams]) -> None:
        calls.append(jobs)
        if jobs[0].job_id.startswith("warmup-"):
            release.wait(30)

    call_hooks.install("echo", hold_warmup)
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], registry=registry_with_warmup())
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
    try:
        (worker,) = mesh.workers
        info = await echo_info(mesh)
        assert (info.ready, info.warmup) == (False, "warming")
        assert sdk_model_info(info).warmup == "warming"
        assert await status_of(f"127.0.0.1:{worker.port}") == "NOT_SERVING"
        status = await scheduler_pb2_grpc.SchedulerStub(channel).GetStatus(
            scheduler_pb2.GetStatusRequest()
        )
        (summary,) = status.workers
        assert list(summary.warming) == ["echo"] and list(summary.models) == ["echo"]

        # A job sent meanwhile waits in line; it is not routed to the warming worker.
        handle = await mesh.gateway_stub().Submit(
            common_pb2.GenerateRequest(model="echo", prompt="after warm-up", seed=4)
        )
        await asyncio.sleep(0.5)
        assert len(calls) == 1

        release.set()
        for _ in range(200):
            info = await echo_info(mesh)
            if info.ready:
                break
            await asyncio.sleep(0.05)
        assert (info.ready, info.warmup) == (True, "warm")
        assert await status_of(f"127.0.0.1:{worker.port}") == "SERVING"
        events = [
            e
            async for e in mesh.gateway_stub().Watch(gateway_pb2.WatchRequest(job_id=handle.job_id))
        ]
        assert events[-1].state == common_pb2.SUCCEEDED
        (warm_batch, user_batch) = calls
        g = warm_batch[0].generation
        assert (len(warm_batch), g.width, g.height, g.steps) == (3, 32, 16, 2)
        assert [j.generation.prompt for j in user_batch] == ["after warm-up"]
    finally:
        release.set()
        call_hooks.remove("echo")
        await channel.close()
        await stop_mesh(mesh)


async def test_models_without_warmup_say_none(tmp_path: Path, models_dir: Path) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        info = await echo_info(mesh)
        assert (info.ready, info.warmup) == (True, "none")
    finally:
        await stop_mesh(mesh)
