"""Worker process wiring: load models off the loop, serve, attach to the scheduler."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mediamesh.common.credentials import NO_INTERNAL_CREDENTIAL, InternalCredentials
from mediamesh.common.errors import StartupError
from mediamesh.common.exposure import refuse_open_off_loopback
from mediamesh.common.folders import writable_folder
from mediamesh.common.registry import ModelSpec, Registry
from mediamesh.common.server import Registration, RunningServer, start_server
from mediamesh.common.settings import ConfigError, MeshConfig, WorkerSettings
from mediamesh.worker import metrics
from mediamesh.worker.api.batch_link import BatchLinks
from mediamesh.worker.api.registration import DeviceMemory, worker_registration
from mediamesh.worker.api.servicer import WorkerServicer, adder, service_names
from mediamesh.worker.api.session import SchedulerSession
from mediamesh.worker.core.batch import DeviceGroupLost
from mediamesh.worker.device_check import refuse_unavailable_devices
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.adapters import refuse_unusable_adapters
from mediamesh.worker.models.device_loss import device_lost
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.models.hub_source import fetch_if_allowed
from mediamesh.worker.models.memory import device_memory, one_line
from mediamesh.worker.models.openmp import team_releaser, then_released
from mediamesh.worker.models.preflight import refuse_unloadable
from mediamesh.worker.parallel.tensor_host import TensorParallelHost
from mediamesh.worker.residency import (
    Residency,
    ResidencyLimits,
    ResidentHost,
    estimate_weight_bytes,
)
from mediamesh.worker.runtime import WorkerRuntime
from mediamesh.worker.warming import needs_warmup, run_warmups, warm_host

log = logging.getLogger("mediamesh.worker")

# Longest a leaving worker waits for the scheduler to confirm its batches' last events:
# longer than the scheduler waits to apply them, so its answer, not this, ends the wait.
SETTLE_WAIT_S = 15.0
# How soon a helper rank that died between batches turns the worker NOT_SERVING.
GROUP_POLL_S = 0.5


def go_offline() -> None:
    """Keeps this process and the helpers it spawns off the hub.

    huggingface_hub reads HF_HUB_OFFLINE once, when imported, and this module's imports have
    done that already: the environment reaches only child processes, so the flag it read is
    set too. Forced rather than defaulted: a worker without allow_downloads never downloads."""
    import huggingface_hub.constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    huggingface_hub.constants.HF_HUB_OFFLINE = True


def hosted_specs(registry: Registry, worker: WorkerSettings) -> list[ModelSpec]:
    if not worker.models:
        return list(registry.models)
    unknown = [m for m in worker.models if registry.get(m) is None]
    if unknown:
        raise ConfigError(
            f"worker {worker.worker_id!r} field models: {', '.join(unknown)} not in the registry"
        )
    return [s for s in registry.models if s.name in worker.models]


def load_hosts(
    config: MeshConfig, worker: WorkerSettings, specs: list[ModelSpec]
) -> tuple[dict[str, ModelHost], Residency]:
    """Runs in a thread: loading weights is torch work and must stay off the event loop.
    With residency limits, single-device models are hosted cold and load on demand."""
    if worker.torch_threads:
        import torch

        torch.set_num_threads(worker.torch_threads)

    def load(spec: ModelSpec) -> ModelHost:
        return load_host(
            spec,
            models_dir=config.models_dir,
            device=worker.device,
            checkpoint_dir=worker.checkpoint_dir,
            max_loaded_adapters=worker.max_loaded_adapters,
        )

    check = functools.partial(refuse_unloadable, models_dir=config.models_dir, device=worker.device)
    limits = ResidencyLimits(worker.max_resident_models, worker.max_resident_bytes)
    residency = Residency(
        limits,
        load,
        functools.partial(estimate_weight_bytes, models_dir=config.models_dir),
        _observe_model_load,
        warm_host,
        check=check,
    )
    # Every entry's devices, files and load options before any model loads: a refusal must
    # not wait for the others, and a model hosted cold would otherwise find out only at its
    # first batch, after evicting another to make room.
    refuse_unavailable_devices(worker, specs)
    writable_folder("worker.checkpoint_dir", worker.checkpoint_dir)
    for spec in specs:
        refuse_unusable_adapters(spec, config.models_dir)
        fetch_if_allowed(spec, config.models_dir, worker.allow_downloads)
        check(spec)
    # Hosted through the residency: loaded at start while they fit, else cold.
    managed = [s for s in specs if limits.limited and s.parallelism.mode == "data"]
    refuse_oversized(worker, residency, managed)
    hosts: dict[str, ModelHost] = {}
    for spec in specs:
        if spec in managed:
            hosts[spec.name] = ResidentHost(spec, worker.device, residency)
            continue
        started = time.perf_counter()
        hosts[spec.name] = load(spec)
        residency.pin(spec.name, time.perf_counter() - started)
        log.info("loaded %s (%s, %s)", spec.name, spec.pipeline, spec.parallelism.mode)
    preload(hosts, residency)
    return hosts, residency


def refuse_oversized(worker: WorkerSettings, residency: Residency, specs: list[ModelSpec]) -> None:
    """StartupError naming max_resident_bytes when one model's weights exceed it alone: it
    could load only past the cap (after evicting every other model), which the cap is there
    to forbid."""
    limit = residency.limits.max_bytes
    if not limit:
        return
    for spec in specs:
        size = residency.size_of(spec)
        if size > limit:
            raise StartupError(
                f"worker {worker.worker_id!r} field max_resident_bytes: {limit} is less than "
                f"the estimated {size} weight bytes ({spec.dtype}) of model {spec.name!r} "
                "alone; raise the limit or host the model on another worker"
            )


def preload(hosts: dict[str, ModelHost], residency: Residency) -> None:
    """Loads managed models at start, in registry order, while the limits leave room (so a
    worker with room for all of them never cold-starts). Their warm-up is left to the
    start-up warm-up, which runs once the worker is registered as warming."""
    limits = residency.limits
    loaded_bytes = 0
    for count, host in enumerate(h for h in hosts.values() if isinstance(h, ResidentHost)):
        size = residency.size_of(host.spec)
        if limits.max_models and count >= limits.max_models:
            return
        if limits.max_bytes and loaded_bytes + size > limits.max_bytes:
            return
        residency.acquire(host.spec, warm=False)
        residency.release(host.spec.name)
        loaded_bytes += size


def _observe_model_load(model: str, seconds: float) -> None:
    metrics.MODEL_LOADS.labels(model).inc()
    metrics.MODEL_LOAD_SECONDS.labels(model).observe(seconds)


@dataclass
class WorkerService:
    runtime: WorkerRuntime
    server: RunningServer
    session: SchedulerSession
    exit_requested: asyncio.Event
    _memory_task: asyncio.Task[None]
    _follow_task: asyncio.Task[None]
    # Runs the warm-up shapes, then registers the models as warm (done at once without any).
    warm_task: asyncio.Task[None]
    # The schedulers' BatchLink streams, which take no new batch once stopping begins.
    links: BatchLinks = field(default_factory=BatchLinks)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def exit_code(self) -> int:
        """The process's exit status once stopped: not 0 when the worker left because it
        cannot run batches, so that its supervisor restarts it."""
        return 0 if self.runtime.fault is None else 1

    async def drain_and_stop(self, grace_s: float) -> None:
        """Checkpoint running jobs (bounded by the grace period), wait until the scheduler
        has applied the last events of the batches that ended, then stop serving."""
        self.runtime.start_drain()
        if not await self.runtime.wait_drained(grace_s):
            log.warning("drain grace of %.0f s ran out with jobs still running", grace_s)
        ended = list(self.runtime.ended_batches)
        if not await self.session.settle(ended, SETTLE_WAIT_S):
            log.warning(
                "the scheduler did not confirm the last events of %d batches in %.0f s",
                len(ended),
                SETTLE_WAIT_S,
            )
        await self.stop()

    async def stop(self, grace_s: float = 1.0) -> None:
        self._memory_task.cancel()
        self._follow_task.cancel()
        self.warm_task.cancel()
        await self.session.stop()
        self.links.close()
        await self.server.stop(grace_s)
        await asyncio.to_thread(self.runtime.close)


async def _follow_runtime(
    runtime: WorkerRuntime, server: RunningServer, exit_requested: asyncio.Event
) -> None:
    """Health follows the runtime: NOT_SERVING once it drains, so readiness stops routing
    here; and a worker whose devices are gone asks to leave (with a failing exit status)."""
    watcher = asyncio.create_task(_watch_parallel_groups(runtime))
    try:
        await runtime.drain_started.wait()
        await server.set_serving(False)
        await runtime.faulted.wait()
        exit_requested.set()
    finally:
        watcher.cancel()


async def _watch_parallel_groups(runtime: WorkerRuntime) -> None:
    """A helper rank that dies between batches loses the group's devices as one dying in a
    batch does; found only at the next batch, the worker would stay ready meanwhile and
    spend that batch's attempt."""
    groups = [h for h in runtime.hosts.values() if isinstance(h, TensorParallelHost)]
    while groups:
        for group in groups:
            lost = group.lost_group()
            if lost is not None:
                runtime.lose_devices(lost)
                return
        await asyncio.sleep(GROUP_POLL_S)


async def _report_memory(devices: list[str], runtime: WorkerRuntime) -> None:
    """Device memory gauges every few seconds. A device whose driver stopped answering
    faults the worker (it could only fail batches); any other failed reading is logged once
    per device and skipped, as the task ending silently left the gauges frozen."""
    unreadable: set[str] = set()
    while True:
        for device in devices:
            try:
                total, free = await asyncio.to_thread(device_memory, device)
            except Exception as exc:
                if await asyncio.to_thread(device_lost, exc, [device]):
                    runtime.lose_devices(f"device {device} stopped answering: {one_line(exc)}")
                    return
                if device not in unreadable:
                    unreadable.add(device)
                    log.warning("cannot read the memory of %s: %s", device, one_line(exc))
                continue
            unreadable.discard(device)
            metrics.DEVICE_MEMORY.labels(device).set(total - free)
            metrics.DEVICE_MEMORY_TOTAL.labels(device).set(total)
            metrics.DEVICE_MEMORY_FREE.labels(device).set(free)
        resident = runtime.residency_report().values()
        metrics.RESIDENT_MODELS.set(sum(1 for is_resident, _ in resident if is_resident))
        await asyncio.sleep(5)


def _host_setting(config: MeshConfig, worker: WorkerSettings) -> str:
    """The setting that gave `worker` its host, for a refusal to name: its `workers` entry,
    unless a flag changed the host, else the `worker` section."""
    for index, entry in enumerate(config.workers):
        if entry.worker_id == worker.worker_id and entry.host == worker.host:
            return f"workers[{index}].host"
    return "worker.host"


async def start_worker(
    config: MeshConfig,
    registry: Registry,
    worker: WorkerSettings,
    *,
    after_exposure_check: Callable[[], None] | None = None,
) -> WorkerService:
    """Start the worker; `after_exposure_check` runs once the fail-closed check and the
    credential passed, before the models load (the process opens its metrics listener there,
    to be scraped while they do)."""
    if not worker.allow_downloads:
        go_offline()
    credentials = InternalCredentials.from_config(config)
    # Before loading any model: a refusal must be quick and cost nothing.
    refuse_open_off_loopback(
        service="worker",
        host=worker.host,
        authenticated=credentials.authenticates,
        insecure=worker.insecure,
        missing=NO_INTERNAL_CREDENTIAL,
        setting=_host_setting(config, worker),
    )
    server_credentials = credentials.server_credentials()
    if after_exposure_check is not None:
        after_exposure_check()
    specs = hosted_specs(registry, worker)
    release_team = await asyncio.to_thread(team_releaser)
    hosts, residency = await asyncio.to_thread(
        then_released, release_team, load_hosts, config, worker, specs
    )
    warming = needs_warmup(hosts)
    runtime = WorkerRuntime(worker.worker_id, worker.pool, hosts, residency, release_team)
    exit_requested = asyncio.Event()

    def on_drain(grace_s: float, exit_after: bool) -> None:
        if exit_after:
            exit_requested.set()

    servicer = WorkerServicer(runtime, on_drain)
    server = await start_server(
        [Registration(service_names(), adder(servicer))],
        host=worker.host,
        port=worker.port,
        max_message_bytes=worker.max_message_bytes,
        internal_token=credentials.token,
        credentials=server_credentials,
        health_port=worker.health_port,
        serving=not warming,
    )
    address = worker.advertise_address or f"{worker.host}:{server.port}"
    devices = sorted({d for h in hosts.values() for d in h.device_ids} or {worker.device})
    registration = functools.partial(
        worker_registration,
        worker_id=worker.worker_id,
        address=address,
        pool=worker.pool,
        devices=[_measure(d) for d in devices],
        hosts=hosts,
        residency=runtime.residency_report,
    )
    session = SchedulerSession(
        runtime, registration(warming=warming), worker.scheduler_address, credentials
    )
    session.start()

    def register_warm() -> None:
        session.update_registration(registration(warming=False))

    warm_task = asyncio.create_task(
        _warm_up(runtime, server, register_warm) if warming else _noop()
    )
    memory_task = asyncio.create_task(_report_memory(devices, runtime))
    follow_task = asyncio.create_task(_follow_runtime(runtime, server, exit_requested))
    log.info("worker %s serving on %s (pool %s)", worker.worker_id, address, worker.pool)
    return WorkerService(
        runtime,
        server,
        session,
        exit_requested,
        memory_task,
        follow_task,
        warm_task,
        servicer.links,
    )


async def _warm_up(
    runtime: WorkerRuntime, server: RunningServer, register_warm: Callable[[], None]
) -> None:
    """Runs the warm-up shapes on the device, then registers as warm and reports SERVING."""
    try:
        took = await asyncio.to_thread(
            then_released, runtime.release_team, run_warmups, runtime.hosts
        )
    except DeviceGroupLost as lost:
        # Left to the task, the worker would stay warming (NOT_SERVING) for ever.
        runtime.lose_devices(str(lost))
        return
    log.info("warm-up done: %s", ", ".join(f"{m} {s:.1f} s" for m, s in took.items()))
    register_warm()
    if not runtime.draining:
        await server.set_serving(True)


async def _noop() -> None:
    return None


def _measure(device: str) -> DeviceMemory:
    try:
        total, free = device_memory(device)
    except Exception:
        total = free = 0
    return DeviceMemory(device, total, free)
