"""Pausing a denoising loop at a step boundary while another batch uses the same pipeline.

The paused loop stays where it is, blocked in its step callback: its latents, generators and
local schedule live on its thread's stack and nobody else touches them. What it shares with
the batch that runs meanwhile is the pipeline object: its sampler (whose step index and
history `step` reads) and the pipeline's per-call attributes (`_guidance_scale`,
`_num_timesteps`, ...). `PipelineAside` hands the other batch a fresh sampler built from the
same config and puts the paused loop's own sampler and attributes back before it resumes, so
the resumed loop computes exactly what it would have without the pause. So are the methods the
paused call's host patched onto the pipeline for that call (a resumed group's
`prepare_latents`, the step count hook on `get_timesteps`): left there, the urgent call would
run them, and start from the paused group's latents.
"""

from __future__ import annotations

from typing import Any


class PipelineAside:
    """The paused loop's share of a pipeline, set aside between `pause` and `resume`."""

    def __init__(self, pipeline: Any) -> None:
        self._pipeline = pipeline
        self._scheduler: Any = None
        self._attributes: dict[str, Any] = {}

    def pause(self) -> None:
        """Keep the loop's sampler and per-call attributes; give the pipeline a fresh sampler."""
        pipeline = self._pipeline
        if pipeline is None:
            return
        self._attributes = {
            name: value for name, value in vars(pipeline).items() if _per_call(pipeline, name)
        }
        for name in self._attributes:
            if _patched_method(pipeline, name):
                del vars(pipeline)[name]
        scheduler = self._scheduler = pipeline.scheduler
        # A fresh instance, not a copy: a resumed loop patches methods onto its instance
        # (checkpoint.resume_schedule), and the other batch must not inherit those.
        pipeline.scheduler = type(scheduler).from_config(scheduler.config)

    def resume(self) -> None:
        """Put the loop's sampler and attributes back, as they were at `pause`."""
        pipeline = self._pipeline
        if pipeline is None or self._scheduler is None:
            return
        pipeline.scheduler = self._scheduler
        vars(pipeline).update(self._attributes)
        self._scheduler, self._attributes = None, {}


def _per_call(pipeline: Any, name: str) -> bool:
    # Pipelines keep a call's settings in single-underscore attributes; dunder and config
    # attributes belong to the object, not to the call. A host's per-call patches shadow
    # a method of the pipeline's class.
    if _patched_method(pipeline, name):
        return True
    return name.startswith("_") and not name.startswith("__") and name != "_internal_dict"


def _patched_method(pipeline: Any, name: str) -> bool:
    return callable(getattr(type(pipeline), name, None)) and callable(vars(pipeline).get(name))
