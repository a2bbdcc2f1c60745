"""Scheduler process: settings -> store, core, runtime, gRPC server; stops on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from mediamesh.common.credentials import NO_INTERNAL_CREDENTIAL, InternalCredentials
from mediamesh.common.errors import StartupError
from mediamesh.common.exclusive_lock import ExclusiveLock, LockHeld
from mediamesh.common.exposure import refuse_open_off_loopback
from mediamesh.common.folders import writable_folder
from mediamesh.common.preemption import preemption_table
from mediamesh.common.registry import Registry
from mediamesh.common.server import Registration, RunningServer, start_server
from mediamesh.common.settings import MeshConfig
from mediamesh.scheduler.api.job_link import JobLinks
from mediamesh.scheduler.api.servicer import SchedulerServicer, registration
from mediamesh.scheduler.api.worker_link import GrpcWorkerLink
from mediamesh.scheduler.batches import WorkerLink
from mediamesh.scheduler.core.scheduler import SchedulerCore
from mediamesh.scheduler.runtime import SchedulerRuntime
from mediamesh.scheduler.settings_policy import core_policy
from mediamesh.scheduler.store.artifact_backends import build_artifact_store
from mediamesh.scheduler.store.health import StoreHealth
from mediamesh.scheduler.store.job_store import JobStore, UnreadableJob

log = logging.getLogger("mediamesh.scheduler")


def new_job_id() -> str:
    return uuid.uuid4().hex


@dataclass
class SchedulerService:
    runtime: SchedulerRuntime
    server: RunningServer
    # Keeps readiness in step with the job store (see `_follow_store`).
    health_task: asyncio.Task[None] | None = None
    # The gateways' JobLink streams, which take no new job once stopping begins.
    links: JobLinks | None = None
    # Held until the store is closed (see `_lock_store`); None for a store handed in.
    store_lock: ExclusiveLock | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_s: float = 2.0) -> None:
        if self.health_task is not None:
            self.health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.health_task
        if self.links is not None:
            self.links.close()
        await self.server.stop(grace_s)
        await self.runtime.stop()
        if self.store_lock is not None:
            self.store_lock.release()


async def _follow_store(health: StoreHealth, server: RunningServer) -> None:
    """Readiness follows the job store: NOT_SERVING while it takes no writes (every Submit
    would answer UNAVAILABLE and no state change would be kept), so that k8s and the
    gateways send work elsewhere, and SERVING again once it does. Liveness (the
    `liveness` name) stays SERVING: a restart would not mend a full or broken disk, and the
    scheduler recovers by itself when the store does."""
    serving = True
    while True:
        await health.changed.wait()
        health.changed.clear()
        if health.failing == (not serving):
            continue
        serving = not health.failing
        if serving:
            log.info("the job store takes writes again; serving")
        else:
            log.warning(
                "the job store fails (%s writes); reporting NOT_SERVING until it recovers",
                ", ".join(health.failing_kinds()),
            )
        await server.set_serving(serving)


def store_lock_path(store_path: Path) -> Path:
    """The file a scheduler locks while it holds the job store at `store_path`."""
    return store_path.with_name(f"{store_path.name}.lock")


def _lock_store(path: Path) -> ExclusiveLock:
    """The store at `path`, locked for this scheduler until released (or the process ends).

    Two schedulers on one store would each recover the other's running jobs as queued and
    deliver its webhooks; the second is refused here, before it reads anything. The lock is
    taken here rather than in JobStore, whose tests open one file twice in one process (a
    flock conflicts across open files, even within a process)."""
    lock_path = store_lock_path(path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        return ExclusiveLock.take(lock_path)
    except LockHeld as held:
        raise StartupError(
            f"scheduler.store_path: {path} is in use by another scheduler ({held.holder}, "
            f"holding {lock_path}); stop that one first, or give this one another store_path"
        ) from held
    except OSError as exc:
        raise StartupError(
            f"scheduler.store_path: cannot open {path}: its lock file {lock_path}: {exc}"
        ) from exc


def _open_store(path: Path) -> JobStore:
    """The job store at `path`; one that cannot be opened is a start-up error naming the
    setting, not a traceback from deep in sqlite3 or pathlib."""
    try:
        return JobStore(path)
    except (OSError, sqlite3.Error) as exc:
        raise StartupError(f"scheduler.store_path: cannot open {path}: {exc}") from exc


async def start_scheduler(
    config: MeshConfig,
    registry: Registry,
    link: WorkerLink | None = None,
    store: JobStore | None = None,
    *,
    after_exposure_check: Callable[[], None] | None = None,
) -> SchedulerService:
    """Start the scheduler; `link` and `store` replace the gRPC link to workers and the
    SQLite store at `scheduler.store_path` (tests pass fakes that fail on demand).
    `after_exposure_check` runs once the fail-closed check and the credential passed, before
    anything binds (the process opens its metrics listener there)."""
    s = config.scheduler
    credentials = InternalCredentials.from_config(config)
    refuse_open_off_loopback(
        service="scheduler",
        host=s.host,
        authenticated=credentials.authenticates,
        insecure=s.insecure,
        missing=NO_INTERNAL_CREDENTIAL,
    )
    server_credentials = credentials.server_credentials()
    if after_exposure_check is not None:
        after_exposure_check()
    writable_folder("scheduler.artifact_dir", s.artifact_dir)
    with contextlib.ExitStack() as on_failure:
        # A store handed in is its caller's to guard.
        store_lock = None if store is not None else _lock_store(s.store_path)
        if store_lock is not None:
            # Let go for whoever starts next in this process (a test); a process that exits
            # here drops it anyway.
            on_failure.callback(store_lock.release)
        service = await _serve(config, registry, credentials, server_credentials, link, store)
        on_failure.pop_all()
    service.store_lock = store_lock
    return service


async def _serve(
    config: MeshConfig,
    registry: Registry,
    credentials: InternalCredentials,
    server_credentials: grpc.ServerCredentials | None,
    link: WorkerLink | None,
    store: JobStore | None,
) -> SchedulerService:
    """The scheduler's runtime and server, started on a store this process holds."""
    s = config.scheduler
    core = SchedulerCore(registry.models, core_policy(s), time.time, new_job_id)
    runtime = SchedulerRuntime(
        core,
        store or _open_store(s.store_path),
        # The standard AWS variables, read here at start-up (never at import).
        build_artifact_store(s, os.environ),
        link or GrpcWorkerLink(credentials, s.max_message_bytes),
        s,
        config.webhooks,
        # Results small enough to go inline reach their watchers from memory, not read back.
        recent_result_max_bytes=config.gateway.inline_result_limit_bytes,
    )
    try:
        await runtime.start()
    except UnreadableJob as exc:
        # Skipping the row would lose an accepted job without a word: refuse, naming it.
        raise StartupError(f"scheduler.store_path: {exc}") from exc
    servicer = SchedulerServicer(
        runtime,
        registry,
        inline_limit=config.gateway.inline_result_limit_bytes,
        chunk_bytes=config.gateway.download_chunk_bytes,
        preemption=dict(preemption_table(registry.models, config.models_dir)),
    )
    names, add = registration(servicer)
    server = await start_server(
        [Registration(names, add)],  # type: ignore[arg-type]
        host=s.host,
        port=s.port,
        max_message_bytes=s.max_message_bytes,
        internal_token=credentials.token,
        credentials=server_credentials,
        health_port=s.health_port,
    )
    log.info("scheduler serving on %s:%d", s.host, server.port)
    following = asyncio.create_task(_follow_store(runtime.store_health, server), name="health")
    return SchedulerService(runtime, server, following, servicer.links)
