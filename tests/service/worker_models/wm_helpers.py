"""Shared helpers for the worker model tests (imported by name; tests dir is on sys.path)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobParams, StepDone, WorkerEvent
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


class GroupingSink:
    """An emit that, like the worker's Handoff, has `together()`: it keeps the events in the
    groups the host emitted them in (one group per event outside a hold)."""

    def __init__(self) -> None:
        self.groups: list[list[WorkerEvent]] = []
        self._held: list[WorkerEvent] | None = None

    def __call__(self, event: WorkerEvent) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self.groups.append([event])

    @contextmanager
    def together(self) -> Iterator[None]:
        self._held = []
        try:
            yield
        finally:
            self.groups.append(self._held)
            self._held = None

    def events(self) -> list[WorkerEvent]:
        return [event for group in self.groups for event in group]

    def steps_in_one_group_each(self, job_ids: list[str]) -> bool:
        """Every step's StepDones, one per job, came in a group of their own."""
        steps = [
            [e for e in g if isinstance(e, StepDone)]
            for g in self.groups
            if g and all(isinstance(e, StepDone) for e in g)
        ]
        seen = [sorted(e.job_id for e in g) for g in steps]
        numbers = [{e.step for e in g} for g in steps]
        return bool(steps) and all(
            s == sorted(job_ids) and len(n) == 1 for s, n in zip(seen, numbers, strict=True)
        )


def run_grouped(host: ModelHost, jobs: list[JobParams]) -> GroupingSink:
    """`run`, keeping the groups the host emitted the events in."""
    sink = GroupingSink()
    host.run_batch(jobs, BatchControl([job.job_id for job in jobs]), sink)
    return sink


def of(events: list[WorkerEvent], job_id: str, kind: type | None = None) -> list[WorkerEvent]:
    return [e for e in events if e.job_id == job_id and (kind is None or isinstance(e, kind))]


def png_pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
