"""Per-job denoising checkpoints and the scheduler shim that resumes from one.

A checkpoint holds one job's latents row after step k, the scheduler's state with its
batched tensors cut down to that row (multistep solvers such as UniPC keep a history of
model outputs), the generator state and the job's parameters. Resuming reinstalls that
state at the scheduler's first use, so any pipeline that calls `set_timesteps` and then
`scale_model_input`/`step` continues bit-for-bit where the interrupted run stopped.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediamesh.common.checkpoint_files import PARTIAL_SUFFIX, checkpoint_file
from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.common.preemption import TIMESTEP_DRIVEN_SCHEDULERS
from mediamesh.common.work import JobParams

# 2: the job's generation parameters are nested under "generation".
FORMAT_VERSION = 2
# Scheduler attributes that are configuration or objects rebuilt by `set_timesteps`.
_SKIPPED_ATTRIBUTES = {"config", "_internal_dict", "noise_sampler"}
_ROW = "__row__"
_NUMPY = "__numpy__"


# What a checkpoint's latents do not depend on: how the result is encoded, and previews.
_RESULT_NEUTRAL_FIELDS = frozenset(
    {"output_format", "output_quality", "fps", "preview_every_steps"}
)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used for this job and model.

    `str()` is the detail for the worker's log (the file's path, the loader's words);
    `reason` says why without them, for the job's caller: a server path, or torch's advice
    to load the file unsafely, is no business of a client's."""

    def __init__(self, detail: str, reason: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason or detail


@dataclass
class Checkpoint:
    model: str
    job: JobParams
    step: int
    total_steps: int
    latents: torch.Tensor  # one row, batch dimension kept
    scheduler_state: dict[str, Any]
    generator_state: torch.Tensor
    remaining_timesteps: torch.Tensor


def checkpoint_path(directory: Path, job_id: str, step: int) -> Path:
    """Where the job's checkpoint after `step` goes (the scheduler deletes it by this name)."""
    return checkpoint_file(directory, job_id, step)


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": FORMAT_VERSION,
        "model": checkpoint.model,
        "job": dataclasses.asdict(checkpoint.job),
        "step": checkpoint.step,
        "total_steps": checkpoint.total_steps,
        "latents": checkpoint.latents.detach().cpu().contiguous(),
        "scheduler_state": checkpoint.scheduler_state,
        "generator_state": checkpoint.generator_state,
        "remaining_timesteps": checkpoint.remaining_timesteps.detach().cpu(),
    }
    # Write then rename so a crash mid-write never leaves a truncated file behind the name;
    # flushed to the disk before the rename, or a host lost soon after could come back with
    # the name pointing at a file cut short. The newest checkpoint is the one a job resumes
    # from after its worker's link or its host is lost, so it must be whole.
    partial = path.with_suffix(PARTIAL_SUFFIX)
    try:
        with partial.open("wb") as file:
            torch.save(payload, file)
            file.flush()
            os.fsync(file.fileno())
        partial.replace(path)
    except BaseException:
        # Half a file (a full disk, a quota) no job can resume from, and which the scheduler
        # would not look for: the job's one attempt reported no checkpoint by this name.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise


def read_checkpoint(path: str, model: str, job: JobParams) -> Checkpoint:
    """Loads and checks a checkpoint for `job`; raises CheckpointError with the reason."""
    try:
        return _read_checkpoint(path, model, job)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} is malformed: {exc!r}", "it is malformed"
        ) from None


def _read_checkpoint(path: str, model: str, job: JobParams) -> Checkpoint:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist", "it no longer exists") from None
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} is unreadable: {exc}", "not a checkpoint this worker wrote"
        ) from None
    if not isinstance(payload, dict) or payload.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has an unknown format", "its format is unknown")
    if payload["model"] != model:
        raise CheckpointError(
            f"checkpoint {path} belongs to model {payload['model']!r}",
            "it belongs to another model",
        )
    stored = _job_from_payload(payload["job"])
    # Another job's file under this job's name (copied, or a reused name) would resume this
    # job with that job's latents: a wrong result that looks right.
    if stored.job_id != job.job_id:
        raise CheckpointError(
            f"checkpoint {path} belongs to job {stored.job_id!r}", "it belongs to another job"
        )
    changed = _changed_field(stored.generation, job.generation)
    if changed:
        raise CheckpointError(
            f"checkpoint {path} was made with a different {changed}",
            f"it was made with a different {changed}",
        )
    step, total = int(payload["step"]), int(payload["total_steps"])
    if not 0 < step < total or total != job.generation.steps:
        raise CheckpointError(
            f"checkpoint {path} has step {step} of {total}", f"it has step {step} of {total}"
        )
    # A scheduler without a step counter cannot be resumed mid-schedule; better to
    # restart now than to fail the job inside the pipeline.
    if _saved_step_index(payload["scheduler_state"]) != step:
        raise CheckpointError(
            f"checkpoint {path} has no scheduler state for step {step}",
            f"it has no scheduler state for step {step}",
        )
    return Checkpoint(
        model=model,
        job=stored,
        step=step,
        total_steps=total,
        latents=payload["latents"],
        scheduler_state=payload["scheduler_state"],
        generator_state=payload["generator_state"],
        remaining_timesteps=payload["remaining_timesteps"],
    )


def _changed_field(stored: GenerationParams, wanted: GenerationParams) -> str | None:
    """The first field the result depends on that differs between the two, if any."""
    for field in dataclasses.fields(GenerationParams):
        if field.name in _RESULT_NEUTRAL_FIELDS:
            continue
        if _as_compared(getattr(stored, field.name)) != _as_compared(getattr(wanted, field.name)):
            return field.name
    return None


def _as_compared(value: Any) -> Any:
    # An input image is the same by its digest; its reference in the scheduler's store may
    # differ between attempts.
    return value.sha256 if isinstance(value, InputImage) else value


def _job_from_payload(fields: dict[str, Any]) -> JobParams:
    """The inverse of `dataclasses.asdict` on a JobParams."""
    generation = GenerationParams.from_record(fields["generation"])
    return JobParams(**{**fields, "generation": generation})


def snapshot_scheduler(
    scheduler: Any, batch_shape: torch.Size, row: int, step: int | None = None
) -> dict[str, Any]:
    """The scheduler's mutable state, with tensors shaped like the latents cut to `row`.

    `step` (steps done) stands in for the step counter of schedulers that keep none
    because `step` derives everything from the timestep it is given."""
    state: dict[str, Any] = {}
    for name, value in vars(scheduler).items():
        if name in _SKIPPED_ATTRIBUTES or callable(value):
            continue
        encoded = _encode(value, batch_shape, row)
        if encoded is not _UNSUPPORTED:
            state[name] = encoded
    if step is not None and type(scheduler).__name__ in TIMESTEP_DRIVEN_SCHEDULERS:
        state.setdefault("_step_index", step)
    return state


def merge_scheduler_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacks the per-job states of jobs resumed together back into one batch state."""
    merged: dict[str, Any] = {}
    for name in states[0]:
        merged[name] = _merge([s[name] for s in states])
    return merged


@contextmanager
def resume_schedule(scheduler: Any, state: dict[str, Any], device: torch.device) -> Iterator[None]:
    """Makes the pipeline's next denoising loop start at the checkpoint's step.

    `set_timesteps` builds the full schedule as usual (so shifts and sigma transforms match
    the uninterrupted run) and then hands the pipeline only the remaining timesteps. At the
    scheduler's first use the full schedule and the saved state come back: step index,
    multistep history and everything else `step` reads.
    """
    pending = [False]
    original_set = scheduler.set_timesteps

    @functools.wraps(original_set)
    def set_timesteps(*args: Any, **kwargs: Any) -> None:
        original_set(*args, **kwargs)
        remaining = len(scheduler.timesteps) - _saved_step_index(state)
        if remaining <= 0:
            raise CheckpointError("checkpoint step is past the end of the schedule")
        scheduler.timesteps = scheduler.timesteps[-remaining:]
        pending[0] = True

    def install() -> None:
        if not pending[0]:
            return
        for name, value in state.items():
            setattr(scheduler, name, _decode(value, getattr(scheduler, name, None), device))
        pending[0] = False

    def wrap(original: Any) -> Any:
        # functools.wraps keeps the signature visible: pipelines inspect `step` to decide
        # whether to pass `generator` and `eta`.
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            install()
            return original(*args, **kwargs)

        return call

    patched = ["set_timesteps"]
    scheduler.set_timesteps = set_timesteps
    for method in ("step", "scale_model_input"):
        if hasattr(scheduler, method):
            setattr(scheduler, method, wrap(getattr(scheduler, method)))
            patched.append(method)
    try:
        yield
    finally:
        for method in patched:
            vars(scheduler).pop(method, None)


def _saved_step_index(state: dict[str, Any]) -> int:
    index = state.get("_step_index")
    if not isinstance(index, int):
        raise CheckpointError("scheduler state has no step index")
    return index


class _Unsupported:
    pass


_UNSUPPORTED = _Unsupported()


def _encode(value: Any, batch_shape: torch.Size, row: int) -> Any:
    if isinstance(value, torch.Tensor):
        if value.shape == batch_shape:
            return {_ROW: value[row : row + 1].detach().cpu().clone()}
        return value.detach().cpu().clone()
    if isinstance(value, np.ndarray):
        return {_NUMPY: torch.from_numpy(np.array(value))}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        items = [_encode(v, batch_shape, row) for v in value]
        if any(item is _UNSUPPORTED for item in items):
            return _UNSUPPORTED
        return items
    return _UNSUPPORTED


def _merge(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict) and _ROW in first:
        return {_ROW: torch.cat([v[_ROW] for v in values], dim=0)}
    if isinstance(first, list):
        return [_merge([v[i] for v in values]) for i in range(len(first))]
    return copy.deepcopy(first)


def _decode(value: Any, current: Any, device: torch.device) -> Any:
    """Restores a saved value; plain tensors go where the fresh schedule put them."""
    if isinstance(value, dict) and _ROW in value:
        return value[_ROW].to(device)
    if isinstance(value, dict) and _NUMPY in value:
        return value[_NUMPY].numpy()
    if isinstance(value, torch.Tensor):
        # Schedulers keep sigmas on the CPU on purpose (no device sync per step).
        target = current.device if isinstance(current, torch.Tensor) else device
        return value.to(target)
    if isinstance(value, list):
        currents = current if isinstance(current, list) and len(current) == len(value) else None
        return [_decode(v, currents[i] if currents else None, device) for i, v in enumerate(value)]
    return value
