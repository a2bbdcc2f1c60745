"""What every rank of a tensor- or context-parallel group runs: the split, and the helper loop."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from diffusers import DiffusionPipeline
from torch.distributed.device_mesh import init_device_mesh

from mediamesh.common.registry import ModelSpec
from mediamesh.common.telemetry import configure_logging
from mediamesh.worker.core import call_hooks
from mediamesh.worker.models.host import host_class, load_pipeline
from mediamesh.worker.models.library_logs import route_library_logs
from mediamesh.worker.parallel.context_parallel import enable_context_parallel
from mediamesh.worker.parallel.flux_tp import shard_flux_transformer
from mediamesh.worker.parallel.sync import SyncedControl

log = logging.getLogger(__name__)

PARENT_POLL_S = 1.0


# Read by ProcessGroupNCCL when the group is made; NCCL_ASYNC_ERROR_HANDLING is its old name.
NCCL_ERROR_HANDLING = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
# CleanUpOnly: a collective that failed or timed out aborts the communicators and raises in
# the ranks, instead of torch's default 3 (SkipCleanUp), which kills the process with
# SIGABRT: rank 0 is the worker, which must live to report the group lost, hand its jobs
# back and exit 1 (ProcessGroupNCCL.hpp, ErrorHandlingMode).
NCCL_CLEAN_UP_ONLY = "2"


def join_group(
    backend: str, *, init_method: str, rank: int, world_size: int, timeout: timedelta
) -> None:
    """`dist.init_process_group`, with NCCL's error handling set first unless the operator
    chose one (in the environment of the worker, which spawned helpers inherit)."""
    if backend == "nccl" and not any(name in os.environ for name in NCCL_ERROR_HANDLING):
        os.environ[NCCL_ERROR_HANDLING[0]] = NCCL_CLEAN_UP_ONLY
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout
    )


def shard_denoiser(
    pipeline: DiffusionPipeline, spec: ModelSpec, device: str, size: int, *, rank: int
) -> None:
    """Collective: all ranks call it once the default process group is up."""
    if spec.parallelism.mode == "context":
        enable_context_parallel(pipeline, spec.parallelism, torch.device(device), rank=rank)
        return
    if spec.parallelism.backend == "deepspeed":
        from mediamesh.worker.parallel.deepspeed_backend import shard_with_deepspeed

        shard_with_deepspeed(pipeline, spec, size)
        return
    mesh = init_device_mesh(torch.device(device).type, (size,))
    shard_flux_transformer(pipeline.transformer, mesh)


def _exit_with_parent(parent: int) -> None:
    # A helper whose rank 0 was killed would otherwise wait on its queue forever.
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(PARENT_POLL_S)


def helper_main(
    *,
    rank: int,
    size: int,
    init_method: str,
    backend: str,
    spec_data: dict[str, Any],
    models_dir: str,
    device: str,
    checkpoint_dir: str,
    commands: Any,
    replies: Any,
    timeout_s: float,
    test_hooks: dict[call_hooks.HookKey, call_hooks.BeforeCall],
    logging_setup: tuple[str, str, str] | None = None,
) -> None:
    """Entry point of ranks 1..size-1 (a spawned process); `logging_setup`: rank 0's
    (`inherited_logging`), so that a helper's lines are in the worker log's format."""
    # Ctrl-C reaches the whole process group: rank 0 (the worker) stops its helpers itself
    # (`TensorParallelHost.close`), and a helper whose rank 0 is gone exits on its own, so
    # the interrupt would only print a KeyboardInterrupt traceback into the worker log.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if logging_setup is not None:
        configure_logging(*logging_setup)
        route_library_logs()
    call_hooks.install_all(test_hooks)
    watchdog = threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True)
    watchdog.start()
    spec = ModelSpec.model_validate(spec_data)
    try:
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        pipeline = load_pipeline(spec, models_dir=Path(models_dir), device=device)
        host = host_class(spec)(spec, pipeline, device=device, checkpoint_dir=Path(checkpoint_dir))
        host.persist_checkpoints = False
        replies.put(("loaded", rank, None))
        join_group(
            backend,
            init_method=init_method,
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=timeout_s),
        )
        shard_denoiser(pipeline, spec, device, size, rank=rank)
        replies.put(("ready", rank, None))
    except Exception as exc:
        replies.put(("error", rank, f"{type(exc).__name__}: {exc}"))
        return
    try:
        _serve(host, device, commands, replies, rank)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _serve(host: Any, device: str, commands: Any, replies: Any, rank: int) -> None:
    while True:
        kind, jobs = commands.get()
        if kind == "stop":
            return
        synced = SyncedControl([job.job_id for job in jobs], None, torch.device(device))
        try:
            host.run_batch(jobs, synced, lambda _event: None)
        except Exception as exc:  # this rank's device is gone (DeviceGroupLost), or a bug
            replies.put(("error", rank, str(exc)))
            continue
        replies.put(("done", rank, None))
