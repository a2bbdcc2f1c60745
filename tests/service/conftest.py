"""An in-process mesh: scheduler, gateway and workers as grpc.aio servers on port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import gateway_pb2_grpc
from mediamesh.common.registry import Registry, load_registry
from mediamesh.common.settings import (
    GatewaySettings,
    InternalAuthSettings,
    InternalTlsSettings,
    MeshConfig,
    SchedulerSettings,
    WorkerSettings,
)
from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.gateway.main import GatewayService, start_gateway
from mediamesh.scheduler.core.interface import SchedulingCore
from mediamesh.scheduler.main import SchedulerService, start_scheduler
from mediamesh.scheduler.store.job_store import JobStore
from mediamesh.worker.main import WorkerService, start_worker


@dataclass
class InProcessMesh:
    config: MeshConfig
    scheduler: SchedulerService
    gateway: GatewayService
    workers: list[WorkerService] = field(default_factory=list)
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    def gateway_stub(self, address: str | None = None) -> gateway_pb2_grpc.GatewayStub:
        channel = grpc.aio.insecure_channel(address or f"127.0.0.1:{self.gateway.port}")
        self.channels.append(channel)
        return gateway_pb2_grpc.GatewayStub(channel)

    @property
    def core(self) -> SchedulingCore:
        return self.scheduler.runtime.core


async def start_mesh(
    tmp_path: Path,
    models_dir: Path,
    worker_models: list[list[str]],
    gateway: dict | None = None,
    scheduler: dict | None = None,
    token: str | None = None,
    internal_tls: dict | None = None,
    worker: dict | None = None,
    registry: Registry | None = None,
    store: JobStore | None = None,
    webhooks: dict | None = None,
) -> InProcessMesh:
    import asyncio

    config = MeshConfig(
        models_dir=models_dir,
        internal_auth=InternalAuthSettings.model_validate({"token": token} if token else {}),
        internal_tls=InternalTlsSettings.model_validate(internal_tls or {}),
        scheduler=SchedulerSettings(
            port=0,
            metrics_port=None,
            store_path=tmp_path / "jobs.sqlite3",
            artifact_dir=tmp_path / "artifacts",
            # Tests that batch concurrent submissions need the window even on an idle mesh.
            **{"heartbeat_interval_s": 0.5, "batch_window_when_idle": True, **(scheduler or {})},
        ),
        gateway=GatewaySettings(
            port=0, metrics_port=None, **{"http_port": None, **(gateway or {})}
        ),
        workers=[],
        webhooks=WebhookSettings.model_validate(webhooks or {}),
    )
    registry = registry or load_registry()
    sched = await start_scheduler(config, registry, store=store)
    address = f"127.0.0.1:{sched.port}"
    config.gateway.scheduler_address = address
    mesh = InProcessMesh(config, sched, await start_gateway(config, registry))
    for index, models in enumerate(worker_models):
        settings = WorkerSettings(
            worker_id=f"w{index}",
            port=0,
            metrics_port=None,
            scheduler_address=address,
            models=models,
            checkpoint_dir=tmp_path / "artifacts" / "checkpoints",
            drain_grace_s=10,
            **(worker or {}),
        )
        mesh.workers.append(await start_worker(config, registry, settings))
    for _ in range(200):
        if len(mesh.core.units) == len(worker_models):
            break
        await asyncio.sleep(0.05)
    return mesh


async def stop_mesh(mesh: InProcessMesh) -> None:
    for channel in mesh.channels:
        await channel.close()
    for worker in mesh.workers:
        await worker.stop()
    await mesh.gateway.stop(0.5)
    await mesh.scheduler.stop(0.5)


@pytest.fixture
async def image_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny", "echo"]])
    yield mesh
    await stop_mesh(mesh)
