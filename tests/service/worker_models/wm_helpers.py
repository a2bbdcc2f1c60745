"""Shared helpers for the worker model tests (imported by name; tests dir is on sys.path)."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.core.batch import BatchControl, JobParams, WorkerEvent
from mediamesh.worker.models.host import ModelHost


def job_for(spec: ModelSpec, job_id: str, seed: int = 0, **overrides: object) -> JobParams:
    d = spec.defaults
    params: dict[str, object] = {
        "job_id": job_id,
        "prompt": "a photo of a cat",
        "steps": d.steps,
        "seed": seed,
        "width": d.width,
        "height": d.height,
        "num_frames": d.num_frames,
        "guidance_scale": d.guidance_scale,
        "duration_s": d.duration_s,
    }
    params.update(overrides)
    return JobParams(**params)  # type: ignore[arg-type]


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
