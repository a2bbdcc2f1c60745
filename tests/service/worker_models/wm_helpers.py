"""Shared helpers for the worker model tests (imported by name; tests dir is on sys.path)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.host import ModelHost


def job_for(
    spec: ModelSpec,
    job_id: str,
    seed: int = 0,
    *,
    resume_checkpoint: str | None = None,
    checkpoint_every_steps: int = 0,
    **overrides: Any,
) -> JobParams:
    """A job at the model's defaults; `overrides` replace generation parameters."""
    d = spec.defaults
    generation = GenerationParams(
        prompt="a photo of a cat",
        steps=d.steps,
        seed=seed,
        width=d.width,
        height=d.height,
        num_frames=d.num_frames,
        guidance_scale=d.guidance_scale,
        duration_s=d.duration_s,
    )
    return JobParams(
        job_id,
        dataclasses.replace(generation, **overrides),
        resume_checkpoint=resume_checkpoint,
        checkpoint_every_steps=checkpoint_every_steps,
    )


def run(
    host: ModelHost,
    jobs: list[JobParams],
    on_event: Callable[[WorkerEvent, BatchControl], None] | None = None,
) -> list[WorkerEvent]:
    control = BatchControl([job.job_id for job in jobs])
    events: list[WorkerEvent] = []

    def emit(event: WorkerEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event, control)

    host.run_batch(jobs, control, emit)
    return events


def of(events: list[WorkerEvent], job_id: str, kind: type | None = None) -> list[WorkerEvent]:
    return [e for e in events if e.job_id == job_id and (kind is None or isinstance(e, kind))]


def png_pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
