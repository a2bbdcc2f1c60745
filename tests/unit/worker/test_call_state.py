"""Per-call state on a shared pipeline object: what a call's step count and a pause may read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobParams, StepDone
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.pausing import PipelineAside
from mediamesh.worker.models.progress import StepTracker, Terminals


def _tracker(tmp_path, events: list, pipeline: Any, **generation: Any) -> StepTracker:
    job = JobParams("a", GenerationParams("x", **generation))
    return StepTracker(
        model="m",
        jobs=[job],
        generators=[torch.Generator().manual_seed(0)],
        control=BatchControl(["a"]),
        terminals=Terminals(events.append),
        checkpoint_dir=tmp_path,
        scheduler=SimpleNamespace(timesteps=torch.arange(10.0)),
        pipeline=pipeline,
    )


def test_total_steps_is_never_the_previous_calls_count(tmp_path) -> None:
    # The pipeline still holds the last call's loop length (2), this job runs 4 steps.
    leftover = SimpleNamespace(_num_timesteps=2)
    events: list = []
    tracker = _tracker(tmp_path, events, leftover, steps=4, strength=1.0)
    assert tracker.total_steps == 4
    for index in range(4):
        tracker.on_step(index, torch.zeros(1, 4))
    assert [(e.step, e.total_steps) for e in events if isinstance(e, StepDone)] == [
        (1, 4),
        (2, 4),
        (3, 4),
        (4, 4),
    ]
    # The host records what this call counted for its tail: that is the total.
    tracker.call_steps = 9
    assert tracker.total_steps == 9


class Pipeline:
    def __init__(self) -> None:
        self.scheduler = Scheduler()
        self._num_timesteps = 12

    def prepare_latents(self) -> str:
        return "fresh"

    def get_timesteps(self) -> tuple[list[int], int]:
        return [], 4


class Scheduler:
    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Scheduler:
        return cls()


def test_a_pause_sets_aside_the_paused_calls_method_patches() -> None:
    pipeline = Pipeline()
    # What the paused call's host patched onto the pipeline for that call.
    pipeline.prepare_latents = lambda: "resumed"  # type: ignore[method-assign]
    pipeline.get_timesteps = lambda: ([], 12)  # type: ignore[method-assign]
    aside = PipelineAside(pipeline)
    aside.pause()
    # The urgent call sees the class's methods, and sets its own attributes.
    assert pipeline.prepare_latents() == "fresh" and pipeline.get_timesteps() == ([], 4)
    pipeline._num_timesteps = 4
    aside.resume()
    assert pipeline.prepare_latents() == "resumed" and pipeline.get_timesteps() == ([], 12)
    assert pipeline._num_timesteps == 12
