"""Run one mesh service in this process on uvloop until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from mediamesh.common.listeners import ListenError
from mediamesh.common.metrics import serve_metrics
from mediamesh.common.registry import Registry, load_registry
from mediamesh.common.server import stop_event_on_signals
from mediamesh.common.settings import MeshConfig, WorkerSettings, load_mesh_config
from mediamesh.common.telemetry import setup_logging, setup_tracing, shutdown_tracing

log = logging.getLogger("mediamesh")
_S = TypeVar("_S")


def load(
    config_path: Path | None, overrides: Mapping[str, object] | None = None
) -> tuple[MeshConfig, Registry]:
    config = load_mesh_config(config_path, overrides)
    return config, load_registry(config.registry_path)


def keep_files_private() -> None:
    """Files and folders a mesh process creates from here on (the job store, results, input
    files, checkpoints, logs) are its user's alone: they hold prompts and generations, which
    other local users have no business reading. Processes it starts inherit the mask."""
    os.umask(0o077)


def _prepare(config: MeshConfig, service: str) -> None:
    keep_files_private()
    setup_logging(config.telemetry, service)
    setup_tracing(config.telemetry, service)


def _metrics(section: str, host: str, port: int | None) -> Callable[[], None]:
    """What a service calls once its fail-closed check passed: the metrics listener, before
    anything slow, so that a worker loading its models for minutes can be scraped meanwhile
    (a port it cannot have is one line)."""
    return lambda: serve_metrics(section, host, port)


async def _started(section: str, start: Callable[[], Awaitable[_S]]) -> _S:
    """The started service; a port it cannot have is named as `section` spells the setting."""
    try:
        return await start()
    except ListenError as exc:
        raise exc.in_section(section) from exc


def _run_until_signalled(
    name: str, start: Callable[[], Awaitable[Any]], grace_s: float | None = None
) -> None:
    """Serve on uvloop until SIGTERM or SIGINT, then stop gracefully: with `grace_s` seconds
    for in-flight calls when given, else the service's own default."""

    async def serve() -> None:
        stop = stop_event_on_signals()
        service = await _started(name, start)
        await stop.wait()
        if grace_s is None:
            log.info("%s stopping", name)
            await service.stop()
        else:
            log.info("%s stopping (grace %.0f s)", name, grace_s)
            await service.stop(grace_s)

    uvloop.run(serve())
    shutdown_tracing()


def run_scheduler(config: MeshConfig, registry: Registry) -> None:
    from mediamesh.scheduler.main import start_scheduler

    s = config.scheduler
    _prepare(config, "scheduler")
    metrics = _metrics("scheduler", s.metrics_host, s.metrics_port)
    _run_until_signalled(
        "scheduler", lambda: start_scheduler(config, registry, after_exposure_check=metrics)
    )


def run_gateway(config: MeshConfig, registry: Registry) -> None:
    from mediamesh.gateway.main import start_gateway

    g = config.gateway
    _prepare(config, "gateway")
    metrics = _metrics("gateway", g.metrics_host, g.metrics_port)
    _run_until_signalled(
        "gateway",
        lambda: start_gateway(config, registry, after_exposure_check=metrics),
        grace_s=g.shutdown_grace_s,
    )


def run_worker(config: MeshConfig, registry: Registry, worker: WorkerSettings) -> int:
    """Serve until signalled, drained with exit, or broken; returns the exit status, which
    is not 0 when the worker left because it cannot work (its supervisor restarts it)."""
    from mediamesh.worker.main import start_worker
    from mediamesh.worker.models.library_logs import route_library_logs

    _prepare(config, f"worker {worker.worker_id}")
    route_library_logs()
    metrics = _metrics("worker", worker.metrics_host, worker.metrics_port)

    async def serve() -> int:
        stop = stop_event_on_signals()
        service = await _started(
            "worker",
            lambda: start_worker(config, registry, worker, after_exposure_check=metrics),
        )
        signalled = asyncio.create_task(stop.wait())
        drained = asyncio.create_task(service.exit_requested.wait())
        await asyncio.wait({signalled, drained}, return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        drained.cancel()
        # SIGTERM is a preemption notice: checkpoint running jobs within the grace period.
        log.info("worker %s draining (grace %.0f s)", worker.worker_id, worker.drain_grace_s)
        await service.drain_and_stop(worker.drain_grace_s)
        return service.exit_code

    code = uvloop.run(serve())
    shutdown_tracing()
    return code
