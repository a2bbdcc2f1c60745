"""Device-seconds estimates per job, calibrated online from measured step times."""

from __future__ import annotations

from dataclasses import dataclass

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.jobs import GenerationParams


@dataclass
class _Calibration:
    step_s_per_unit: float
    overhead_s: float
    samples: int = 0


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

    def step_s_per_unit(self, model: str) -> float:
        """The calibrated seconds per step per work unit (megapixel, frame or second)."""
        return self._calibration[model].step_s_per_unit
