"""What one generation asks for, shared by every service's pure code."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Priority(IntEnum):
    """Lower value is more urgent; the numeric gap is what aging has to close."""

    REALTIME = 0
    STANDARD = 1
    BATCH = 2


@dataclass(frozen=True)
class GenerationParams:
    """A request with every default applied: exactly what a worker runs."""

    prompt: str
    negative_prompt: str = ""
    steps: int = 4
    seed: int = 0
    width: int = 0
    height: int = 0
    num_frames: int = 0
    guidance_scale: float = 0.0
    duration_s: float = 0.0
    # How the worker encodes the result: a format of the model's modality ("" only in
    # records written before formats existed: the worker then takes the model's default),
    # lossy image quality (jpeg, webp) and video frames per second; 0 where they do not apply.
    output_format: str = ""
    output_quality: int = 0
    fps: int = 0

    def work_units(self, modality: str) -> float:
        """Size of one job in the cost model's unit: megapixel-frames, or seconds of audio."""
        if modality == "audio":
            return max(self.duration_s, 0.1)
        return max(self.width * self.height, 1) / 1e6 * max(self.num_frames, 1)
