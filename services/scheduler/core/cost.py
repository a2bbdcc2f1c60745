"""Device-seconds estimates per job, calibrated online from measured step times.

`estimate` is a job's share of the device: one seconds-per-unit figure (megapixel-frames,
or seconds of audio) averaged over the steps of the batches that ran, so the backlog and
the ETAs it adds up to reflect batching as it happens. A step also has a fixed part (the
pipeline's Python, kernel launches), which that figure folds in: after small images it
priced a large one at many times its cost (64x64 images made a 512x512 job read 6 s where
it ran in 1.2), and a job refused for too short a timeout is refused for good.

So a refusal relies on `least_estimate` instead: the least a job can take given the steps
measured so far, from each measured size of batch work's own average step time. A step
takes no less when the work grows and no more than proportionally (its fixed part is never
negative), so a job at least as large as a measured size takes at least that size's step,
and a smaller one at least its proportional share of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.jobs import GenerationParams

# Batch work within this factor of a measured size counts as that size: its measurement
# moves that size's average instead of adding another.
_SAME_SIZE = 1.25
# Sizes kept per model; the one measured longest ago gives way to a new one.
_MAX_SIZES = 24


@dataclass
class _Size:
    """The averaged work and step seconds of batches of about one size."""

    work: float
    step_s: float
    # The model's observation count when it was last measured, to find the stalest.
    seen_at: int


@dataclass
class _Calibration:
    step_s_per_unit: float
    overhead_s: float
    samples: int = 0
    sizes: list[_Size] = field(default_factory=list)


class CostModel:
    """Seconds of device time a job needs: overhead + steps x step time per work unit.

    Starts from the registry's prior and moves toward measured step times with an
    exponential average, so estimates track the hardware the mesh actually runs on.
    """

    def __init__(self, specs: list[ModelSpec], smoothing: float = 0.2) -> None:
        self._smoothing = smoothing
        self._modality = {s.name: s.modality for s in specs}
        self._calibration = {
            s.name: _Calibration(s.cost.step_s_per_megapixel, s.cost.overhead_s) for s in specs
        }

    def estimate(self, model: str, params: GenerationParams) -> float:
        """Device-seconds a job of `model` with `params` needs, alone on a device."""
        cal = self._calibration[model]
        units = params.work_units(self._modality[model])
        return cal.overhead_s + params.steps * cal.step_s_per_unit * units

    def least_estimate(self, model: str, params: GenerationParams) -> float:
        """Device-seconds such a job needs at the least, alone on a device, as far as the
        steps measured show: what a refusal for lack of time may rely on."""
        cal = self._calibration[model]
        work = params.work_units(self._modality[model])
        if not cal.sizes:
            return cal.overhead_s + params.steps * cal.step_s_per_unit * work
        least_step = max(
            size.step_s if size.work <= work else size.step_s * work / size.work
            for size in cal.sizes
        )
        return cal.overhead_s + params.steps * least_step

    def step_seconds(self, model: str, params: GenerationParams) -> float:
        """Seconds one denoising step of such a job takes, alone on a device."""
        cal = self._calibration[model]
        return cal.step_s_per_unit * params.work_units(self._modality[model])

    def observe_step(
        self, model: str, params: GenerationParams, batch_size: int, seconds: float
    ) -> None:
        """One denoising step of a batch took `seconds`; each job's share is seconds/batch."""
        if seconds <= 0 or batch_size <= 0 or model not in self._calibration:
            return
        cal = self._calibration[model]
        units = params.work_units(self._modality[model])
        measured = seconds / batch_size / units
        if cal.samples == 0:
            cal.step_s_per_unit = measured
        else:
            cal.step_s_per_unit += self._smoothing * (measured - cal.step_s_per_unit)
        cal.samples += 1
        self._observe_size(cal, units * batch_size, seconds)

    def _observe_size(self, cal: _Calibration, work: float, seconds: float) -> None:
        near = min(cal.sizes, key=lambda size: abs(math.log(size.work / work)), default=None)
        if near is not None and max(near.work, work) <= _SAME_SIZE * min(near.work, work):
            near.work += self._smoothing * (work - near.work)
            near.step_s += self._smoothing * (seconds - near.step_s)
            near.seen_at = cal.samples
            return
        if len(cal.sizes) >= _MAX_SIZES:
            cal.sizes.remove(min(cal.sizes, key=lambda size: size.seen_at))
        cal.sizes.append(_Size(work, seconds, cal.samples))

    def step_s_per_unit(self, model: str) -> float:
        """The calibrated seconds per step per work unit (megapixel, frame or second)."""
        return self._calibration[model].step_s_per_unit
