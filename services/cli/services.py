"""Run one mesh service in this process on uvloop until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import uvloop

from services.common.metrics import serve_metrics
from services.common.registry import Registry, load_registry
from services.common.server import stop_event_on_signals
from services.common.settings import MeshConfig, WorkerSettings, load_mesh_config
from services.common.telemetry import setup_logging, setup_tracing, shutdown_tracing

log = logging.getLogger("mediamesh")


def load(config_path: Path | None, overrides: dict | None = None) -> tuple[MeshConfig, Registry]:
    config = load_mesh_config(config_path, overrides)
    return config, load_registry(config.registry_path)


def _prepare(config: MeshConfig, service: str, metrics_host: str, metrics_port: int | None) -> None:
    setup_logging(config.telemetry, service)
    setup_tracing(config.telemetry, service)
    serve_metrics(metrics_host, metrics_port)


def run_scheduler(config: MeshConfig, registry: Registry) -> None:
    from services.scheduler.main import start_scheduler

    s = config.scheduler
    _prepare(config, "scheduler", s.host, s.metrics_port)

    async def serve() -> None:
        stop = stop_event_on_signals()
        service = await start_scheduler(config, registry)
        await stop.wait()
        log.info("scheduler stopping")
        await service.stop()

    uvloop.run(serve())
    shutdown_tracing()


def run_gateway(config: MeshConfig, registry: Registry) -> None:
    from services.gateway.main import start_gateway

    g = config.gateway
    _prepare(config, "gateway", g.host, g.metrics_port)

    async def serve() -> None:
        stop = stop_event_on_signals()
        service = await start_gateway(config, registry)
        await stop.wait()
        log.info("gateway stopping")
        await service.stop()

    uvloop.run(serve())
    shutdown_tracing()


def run_worker(config: MeshConfig, registry: Registry, worker: WorkerSettings) -> None:
    from services.worker.main import start_worker

    _prepare(config, f"worker {worker.worker_id}", worker.host, worker.metrics_port)

    async def serve() -> None:
        stop = stop_event_on_signals()
        service = await start_worker(config, registry, worker)
        signalled = asyncio.create_task(stop.wait())
        drained = asyncio.create_task(service.exit_requested.wait())
        await asyncio.wait({signalled, drained}, return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        drained.cancel()
        # SIGTERM is a preemption notice: checkpoint running jobs within the grace period.
        log.info("worker %s draining (grace %.0f s)", worker.worker_id, worker.drain_grace_s)
        await service.drain_and_stop(worker.drain_grace_s)

    uvloop.run(serve())
    shutdown_tracing()
