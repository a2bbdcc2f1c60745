"""Tensor parallelism: one model sharded over `size` ranks of a torch.distributed group.

Rank 0 lives in the worker process and speaks gRPC through `TensorParallelHost`; ranks
1..size-1 are helper processes it spawns. Every rank loads the full pipeline and shards
the transformer; text encoders, VAE and the sampler run replicated, so all ranks hold the
same latents. Each batch is sent to the helpers over a queue (not a collective: an idle
wait must not hit the group's timeout), then all ranks run it in lockstep, agreeing on
cancel/preempt through `SyncedControl`. Rank 0 alone emits events and writes checkpoints.

Limits: Flux only (other families use data or pipeline mode); one tensor-parallel host per
worker process, since torch.distributed has one default group per process.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import multiprocessing.connection
import queue
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from diffusers import DiffusionPipeline

from mediamesh.common.registry import ModelSpec
from mediamesh.common.telemetry import inherited_logging
from mediamesh.common.work import JobFailed, JobParams, WorkerEvent
from mediamesh.worker.core import call_hooks
from mediamesh.worker.core.batch import ControlView, DeviceGroupLost, Emit, emitted_together
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.host import host_class, load_pipeline
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.preflight import refuse_unstartable
from mediamesh.worker.parallel.rank import helper_main, join_group, shard_denoiser
from mediamesh.worker.parallel.sync import SyncedControl

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 300.0
# Longest a rank may wait in one collective: a dead peer turns into an error, not a hang.
COLLECTIVE_TIMEOUT = timedelta(seconds=300)
BATCH_ACK_TIMEOUT_S = 60.0
ACK_POLL_S = 0.5
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TensorParallelHost:
    """Rank 0 of the group; `close()` stops and reaps every helper process."""

    def __init__(
        self,
        spec: ModelSpec,
        inner: DiffusionHost,
        helpers: list[Any],
        commands: list[Any],
        replies: Any,
        device: torch.device,
    ) -> None:
        self.spec = spec
        self.inner = inner
        self.device_ids = list(inner.device_ids)
        self._helpers = helpers
        self._commands = commands
        self._replies = replies
        self._device = device
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._closing = False

    def run_batch(self, jobs: list[JobParams], control: ControlView, emit: Emit) -> None:
        """Runs the batch on every rank; raises DeviceGroupLost when the group is down,
        before the batch or because of it, leaving its unfinished jobs unreported."""
        with self._lock:
            self._check_group()
            for commands in self._commands:
                commands.put(("batch", jobs))
            synced = SyncedControl([job.job_id for job in jobs], control, self._device)
            # A rank dying mid-batch makes rank 0's collectives fail, and with them every
            # job; those failures are the group's, not the jobs', so they are held back
            # until the group is known to have survived the batch.
            forward = _HoldingFailures(emit)
            self.inner.run_batch(jobs, synced, forward)
            self._await_acks()
            self._check_group()
            for failure in forward.failures:
                emit(failure)

    def _check_group(self) -> None:
        lost = self.lost_group()
        if lost is not None:
            raise DeviceGroupLost(lost)

    def lost_group(self) -> str | None:
        """Why the group can run no more batches, or None while it can. Does not block, so
        the worker polls it between batches: a rank dying while idle must turn the worker
        NOT_SERVING then, not at the next batch it would fail."""
        if self._broken is None and not self._closing and self._helper_exited():
            self._broken = "a helper rank exited"
        if self._broken is None:
            return None
        group = f"{self.spec.parallelism.mode}-parallel group of {self.spec.name}"
        return f"{group} is down: {self._broken}"

    def _helper_exited(self) -> bool:
        # The sentinels turn ready once a process ends, without reaping it: safe to read
        # from the worker's watcher while a batch thread checks the same processes.
        sentinels = [process.sentinel for process in self._helpers]
        return bool(sentinels) and bool(multiprocessing.connection.wait(sentinels, timeout=0))

    def _await_acks(self) -> None:
        deadline = time.monotonic() + BATCH_ACK_TIMEOUT_S
        pending = len(self._helpers)
        while pending:
            try:
                kind, rank, detail = self._replies.get(timeout=ACK_POLL_S)
            except queue.Empty:
                # A dead rank never answers: notice it now rather than at the deadline.
                if not self._helpers_alive():
                    self._broken = "a helper rank exited during a batch"
                    return
                if time.monotonic() > deadline:
                    self._broken = "a helper rank did not finish the batch"
                    return
                continue
            pending -= 1
            if kind != "done":
                self._broken = f"rank {rank}: {detail}"

    def _helpers_alive(self) -> bool:
        return all(process.is_alive() for process in self._helpers)

    def close(self) -> None:
        self._closing = True
        for commands in self._commands:
            with contextlib.suppress(OSError, ValueError):
                commands.put(("stop", None))
        for process in self._helpers:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
                process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._helpers = []
        if dist.is_initialized():
            dist.destroy_process_group()
        self.inner.close()


def load_tensor_parallel_host(
    spec: ModelSpec, *, models_dir: Path, device: str, checkpoint_dir: Path
) -> TensorParallelHost | DiffusionHost:
    options = spec.parallelism
    if options.backend == "deepspeed":
        from mediamesh.worker.parallel.deepspeed_backend import check_deepspeed

        check_deepspeed(spec, device)
    refuse_unstartable(spec, Path(spec.resolved_source(models_dir)))
    size = options.size
    devices = options.devices or [device] * size
    if len(devices) != size:
        raise ModelLoadError(f"model {spec.name!r}: {len(devices)} devices for {size} ranks")
    refuse_shared_gpus(spec, devices)
    if size == 1 and options.backend == "torch":
        pipeline = load_pipeline(spec, models_dir=models_dir, device=devices[0])
        return host_class(spec)(spec, pipeline, device=devices[0], checkpoint_dir=checkpoint_dir)
    return start_rank_group(
        spec, devices=devices, models_dir=models_dir, checkpoint_dir=checkpoint_dir
    )


def refuse_shared_gpus(spec: ModelSpec, devices: list[str]) -> None:
    """ModelLoadError naming parallelism.devices when a CUDA group's ranks would share a
    GPU or mix in the CPU: NCCL fails such a group only once it starts ("Duplicate GPU
    detected"), after every rank loaded its weights. Ranks sharing the CPU over gloo are
    fine (the tests run both modes so)."""
    if not any(device.startswith("cuda") for device in devices):
        return
    named = "" if spec.parallelism.devices else "unset, so every rank takes the worker's device; "
    prefix = f"model {spec.name!r} field parallelism.devices: {named}"
    if not all(device.startswith("cuda") for device in devices):
        raise ModelLoadError(
            f"{prefix}{devices} mixes CUDA and other devices; a group's ranks are all CUDA "
            "(NCCL) or all CPU (gloo)"
        )
    # "cuda" is the current device, cuda:0 in a process that has not chosen another.
    gpus = [device if ":" in device else "cuda:0" for device in devices]
    shared = sorted({gpu for gpu in gpus if gpus.count(gpu) > 1})
    if shared:
        raise ModelLoadError(
            f"{prefix}{len(devices)} ranks would share {', '.join(shared)}, and NCCL needs "
            f"one GPU per rank; list {len(devices)} different CUDA devices"
        )


def start_rank_group(
    spec: ModelSpec,
    *,
    devices: list[str],
    models_dir: Path,
    checkpoint_dir: Path,
    pipeline: DiffusionPipeline | None = None,
) -> TensorParallelHost:
    """Spawns ranks 1..len(devices)-1, joins them as rank 0 and splits the denoiser the
    way the entry's mode says. `pipeline`, when given, is rank 0's, already loaded."""
    size = len(devices)
    if dist.is_initialized():
        raise ModelLoadError(
            f"model {spec.name!r}: this worker process already has a torch.distributed group; "
            "run one tensor- or context-parallel model per worker process"
        )
    backend = "nccl" if devices[0].startswith("cuda") else "gloo"
    init_method = f"tcp://127.0.0.1:{free_port()}"
    context = mp.get_context("spawn")
    replies = context.Queue()
    helpers, commands = [], []
    for rank in range(1, size):
        inbox = context.Queue()
        process = context.Process(
            target=helper_main,
            name=f"mediamesh-tp-{spec.name}-rank{rank}",
            kwargs={
                "rank": rank,
                "size": size,
                "init_method": init_method,
                "backend": backend,
                "spec_data": spec.model_dump(),
                "models_dir": str(models_dir),
                "device": devices[rank],
                "checkpoint_dir": str(checkpoint_dir),
                "commands": inbox,
                "replies": replies,
                "timeout_s": COLLECTIVE_TIMEOUT.total_seconds(),
                "test_hooks": call_hooks.helper_rank_hooks(),
                "logging_setup": inherited_logging(f"rank {rank}"),
            },
            daemon=True,
        )
        process.start()
        helpers.append(process)
        commands.append(inbox)
    try:
        if pipeline is None:
            pipeline = load_pipeline(spec, models_dir=models_dir, device=devices[0])
        _await(replies, helpers, "loaded")
        if devices[0].startswith("cuda"):
            torch.cuda.set_device(torch.device(devices[0]))
        join_group(
            backend, init_method=init_method, rank=0, world_size=size, timeout=COLLECTIVE_TIMEOUT
        )
        shard_denoiser(pipeline, spec, devices[0], size, rank=0)
        _await(replies, helpers, "ready")
    except BaseException:
        _reap(helpers, commands)
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    inner = host_class(spec)(
        spec, pipeline, device=devices[0], checkpoint_dir=checkpoint_dir, device_ids=devices
    )
    return TensorParallelHost(spec, inner, helpers, commands, replies, torch.device(devices[0]))


def _await(replies: Any, helpers: list[Any], expected: str) -> None:
    pending = len(helpers)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while pending:
        if time.monotonic() > deadline:
            raise ModelLoadError(f"parallel-group helpers not {expected} in {STARTUP_TIMEOUT_S}s")
        try:
            kind, rank, detail = replies.get(timeout=1.0)
        except queue.Empty:
            if not all(process.is_alive() for process in helpers):
                raise ModelLoadError("a parallel-group helper rank died while starting") from None
            continue
        if kind == "error":
            raise ModelLoadError(f"parallel-group rank {rank} failed to start: {detail}")
        if kind == expected:
            pending -= 1


def _reap(helpers: list[Any], commands: list[Any]) -> None:
    for inbox in commands:
        inbox.put(("stop", None))
    for process in helpers:
        process.join(2)
        if process.is_alive():
            process.kill()
            process.join()


class _HoldingFailures:
    """Rank 0's emit during a batch: failures are held back, the rest go out, a step's
    progress still together (`emitted_together`)."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.failures: list[JobFailed] = []

    def __call__(self, event: WorkerEvent) -> None:
        """Send `event`, or keep it if it is a failure."""
        if isinstance(event, JobFailed):
            self.failures.append(event)
        else:
            self._emit(event)

    def together(self) -> contextlib.AbstractContextManager[object]:
        """The wrapped emit's grouping."""
        return emitted_together(self._emit)
