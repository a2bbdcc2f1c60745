"""Worker process wiring: load models off the loop, serve, attach to the scheduler."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass

from mediamesh.common.registry import ModelSpec, Registry
from mediamesh.common.server import Registration, RunningServer, start_server
from mediamesh.common.settings import ConfigError, MeshConfig, WorkerSettings
from mediamesh.worker import metrics
from mediamesh.worker.api.registration import DeviceMemory, worker_registration
from mediamesh.worker.api.servicer import WorkerServicer, adder, service_names
from mediamesh.worker.api.session import SchedulerSession
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.models.memory import device_memory
from mediamesh.worker.runtime import WorkerRuntime

log = logging.getLogger("mediamesh.worker")


def hosted_specs(registry: Registry, worker: WorkerSettings) -> list[ModelSpec]:
    if not worker.models:
        return list(registry.models)
    unknown = [m for m in worker.models if registry.get(m) is None]
    if unknown:
        raise ConfigError(
            f"worker {worker.worker_id!r} field models: {', '.join(unknown)} not in the registry"
        )
    return [s for s in registry.models if s.name in worker.models]


def load_hosts(config: MeshConfig, worker: WorkerSettings, specs: list[ModelSpec]) -> dict:
    """Runs in a thread: loading weights is torch work and must stay off the event loop."""
    if worker.torch_threads:
        import torch

        torch.set_num_threads(worker.torch_threads)
    hosts: dict[str, ModelHost] = {}
    for spec in specs:
        hosts[spec.name] = load_host(
            spec,
            models_dir=config.models_dir,
            device=worker.device,
            checkpoint_dir=worker.checkpoint_dir,
        )
        log.info("loaded %s (%s, %s)", spec.name, spec.pipeline, spec.parallelism.mode)
    return hosts


@dataclass
class WorkerService:
    runtime: WorkerRuntime
    server: RunningServer
    session: SchedulerSession
    exit_requested: asyncio.Event
    _memory_task: asyncio.Task

    @property
    def port(self) -> int:
        return self.server.port

    async def drain_and_stop(self, grace_s: float) -> None:
        """Checkpoint running jobs (bounded by the grace period), then stop serving."""
        self.runtime.start_drain()
        if not await self.runtime.wait_drained(grace_s):
            log.warning("drain grace of %.0f s ran out with jobs still running", grace_s)
        await asyncio.sleep(0.2)  # let the last events reach the scheduler
        await self.stop()

    async def stop(self, grace_s: float = 1.0) -> None:
        self._memory_task.cancel()
        await self.session.stop()
        await self.server.stop(grace_s)
        await asyncio.to_thread(self.runtime.close)


async def _report_memory(devices: list[str]) -> None:
    while True:
        for device in devices:
            total, free = await asyncio.to_thread(device_memory, device)
            metrics.DEVICE_MEMORY.labels(device).set(total - free)
            metrics.DEVICE_MEMORY_TOTAL.labels(device).set(total)
        await asyncio.sleep(5)


async def start_worker(
    config: MeshConfig, registry: Registry, worker: WorkerSettings
) -> WorkerService:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    specs = hosted_specs(registry, worker)
    hosts = await asyncio.to_thread(load_hosts, config, worker, specs)
    runtime = WorkerRuntime(worker.worker_id, worker.pool, hosts)
    exit_requested = asyncio.Event()

    def on_drain(grace_s: float, exit_after: bool) -> None:
        if exit_after:
            exit_requested.set()

    token = config.internal_auth.resolve()
    server = await start_server(
        [Registration(service_names(), adder(WorkerServicer(runtime, on_drain)))],
        host=worker.host,
        port=worker.port,
        max_message_bytes=worker.max_message_bytes,
        internal_token=token,
    )
    address = worker.advertise_address or f"{worker.host}:{server.port}"
    devices = sorted({d for h in hosts.values() for d in h.device_ids} or {worker.device})
    registration = worker_registration(
        worker_id=worker.worker_id,
        address=address,
        pool=worker.pool,
        devices=[_measure(d) for d in devices],
        hosts=hosts,
    )
    session = SchedulerSession(runtime, registration, worker.scheduler_address, token)
    session.start()
    memory_task = asyncio.create_task(_report_memory(devices))
    log.info("worker %s serving on %s (pool %s)", worker.worker_id, address, worker.pool)
    return WorkerService(runtime, server, session, exit_requested, memory_task)


def _measure(device: str) -> DeviceMemory:
    try:
        total, free = device_memory(device)
    except Exception:
        total = free = 0
    return DeviceMemory(device, total, free)
