"""Out-of-memory recovery: a batch that does not fit runs again in halves, down to one job.

Only a job that cannot fit alone fails, with RESOURCE_EXHAUSTED naming the model and the
shape. Each split is announced with an "oom_split" notice carrying the new batch ceiling,
from which the scheduler learns to send batches of that model and shape no larger.
"""

from __future__ import annotations

import gc
import logging
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from mediamesh.common.errors import StatusCode
from mediamesh.common.work import JobFailed, JobNotice, JobParams
from mediamesh.worker.models.progress import Terminals

log = logging.getLogger(__name__)
T = TypeVar("T")

OOM_NOTICE = "oom_split"
# What allocators say when they run out, besides CUDA's own exception type.
_ALLOCATION_FAILURE = re.compile(
    r"out of memory|can't allocate memory|not enough memory|failed to allocate", re.IGNORECASE
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation failure (CUDA's OutOfMemoryError, or a RuntimeError
    from the CPU or another allocator saying so)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and bool(_ALLOCATION_FAILURE.search(str(exc)))


def free_memory(device: torch.device) -> None:
    """Drops what the failed attempt left behind: its tensors, then the allocator's cache."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def shape_text(job: JobParams) -> str:
    """The size of a job as an operator reads it: 1024x1024, x49 frames, 10 s of audio."""
    g = job.generation
    text = f"{g.width}x{g.height}" if g.width else ""
    if g.num_frames:
        text += f"x{g.num_frames} frames"
    if g.duration_s:
        text += f"{g.duration_s:g} s"
    return text or "default size"


def retry_in_halves(
    model: str,
    device: torch.device,
    jobs: Sequence[JobParams],
    extras: Sequence[T] | None,
    terminals: Terminals,
    exc: BaseException,
    run_group: Callable[[list[JobParams], list[T] | None], None],
) -> None:
    """After `exc` (an allocation failure) ran `jobs` out of memory: runs each half through
    `run_group` (which may split again), or fails a lone job as RESOURCE_EXHAUSTED.
    `extras` are per-job values that travel with their job (resume checkpoints)."""
    free_memory(device)
    waiting = [i for i, job in enumerate(jobs) if not terminals.has(job.job_id)]
    if not waiting:
        return
    if len(waiting) == 1:
        job = jobs[waiting[0]]
        message = (
            f"model {model!r} cannot fit one job of {shape_text(job)} "
            f"({job.generation.steps} steps) on {device}: {exc}"
        )
        terminals.send(job.job_id, JobFailed(job.job_id, StatusCode.RESOURCE_EXHAUSTED, message))
        return
    ceiling = (len(waiting) + 1) // 2
    log.warning(
        "batch of %d on %s ran out of memory at %s; retrying in halves",
        len(waiting),
        model,
        shape_text(jobs[waiting[0]]),
    )
    for i in waiting:
        notice = (
            f"a batch of {len(waiting)} ran out of memory on {device}; "
            f"running again in batches of at most {ceiling}"
        )
        terminals.emit(JobNotice(jobs[i].job_id, OOM_NOTICE, notice, fitted_batch=ceiling))
    for half in (waiting[:ceiling], waiting[ceiling:]):
        run_group(
            [jobs[i] for i in half],
            [extras[i] for i in half] if extras is not None else None,
        )
