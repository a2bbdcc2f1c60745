"""What one generation asks for, shared by every service's pure code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any


class Priority(IntEnum):
    """Lower value is more urgent; the numeric gap is what aging has to close."""

    REALTIME = 0
    STANDARD = 1
    BATCH = 2


@dataclass(frozen=True)
class InputImage:
    """An input image of a job, already checked: its identity and decoded size.

    The bytes are not here: the scheduler keeps them with the job (`ref` names them in its
    input store) and hands them to the worker with each batch."""

    sha256: str
    width: int
    height: int
    mime_type: str
    ref: str = ""


@dataclass(frozen=True)
class AdapterScale:
    """A LoRA adapter of the model's registry entry, applied at `scale`."""

    name: str
    scale: float


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
    # Latent preview on every Nth progress event; 0 = none.
    preview_every_steps: int = 0
    # Image inputs (img2img, inpainting, image-to-video) and how far to move from them.
    image: InputImage | None = None
    mask_image: InputImage | None = None
    strength: float = 0.0
    # LoRA adapters in request order, every scale resolved.
    adapters: tuple[AdapterScale, ...] = ()
    # False: run without the model's step cache (reference quality).
    use_cache: bool = True

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> GenerationParams:
        """Rebuild from `dataclasses.asdict` output read back from JSON (the job store, a
        checkpoint's metadata). Keys this version does not know are dropped."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in known}
        for name in ("image", "mask_image"):
            if isinstance(values.get(name), Mapping):
                values[name] = InputImage(**values[name])
        values["adapters"] = tuple(
            AdapterScale(**a) if isinstance(a, Mapping) else a for a in values.get("adapters", ())
        )
        return cls(**values)

    def to_record(self) -> dict[str, Any]:
        """`dataclasses.asdict(self)`, key for key, without its deep copy of every value:
        the scheduler writes each job's params once, and asdict was most of that cost."""
        record = {name: getattr(self, name) for name in _PARAMS_FIELDS}
        for name in ("image", "mask_image"):
            image = record[name]
            if image is not None:
                record[name] = {f: getattr(image, f) for f in _IMAGE_FIELDS}
        record["adapters"] = [{f: getattr(a, f) for f in _ADAPTER_FIELDS} for a in self.adapters]
        return record

    def work_units(self, modality: str) -> float:
        """Size of one job in the cost model's unit: megapixel-frames, or seconds of audio."""
        if modality == "audio":
            return max(self.duration_s, 0.1)
        return max(self.width * self.height, 1) / 1e6 * max(self.num_frames, 1)


_PARAMS_FIELDS = tuple(f.name for f in fields(GenerationParams))
_IMAGE_FIELDS = tuple(f.name for f in fields(InputImage))
_ADAPTER_FIELDS = tuple(f.name for f in fields(AdapterScale))
