"""A registry entry's warm-up: shapes a worker runs once before it reports ready.

Compilation and kernel autotuning happen on the first call of each shape; running the
listed shapes at start means no user request pays for them. Pure.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WarmupShape(BaseModel):
    """One warm-up call: a batch of `batch` jobs of this size, `steps` steps long."""

    # Strict, like the registry's sections of numbers: a lax model reads `batch: true` as 1
    # and `steps: "2"` as 2, where each is a mistake to name.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # 0 takes the model's default for that field.
    width: int = Field(0, ge=0)
    height: int = Field(0, ge=0)
    num_frames: int = Field(0, ge=0)
    duration_s: float = Field(0.0, ge=0)
    steps: int = Field(1, ge=1)
    batch: int = Field(1, ge=1)


# What ListModels and `mediamesh status` say about a model's warm-up.
WARMUP_NONE = "none"  # the entry lists no warm-up shapes
WARMUP_WARMING = "warming"  # a worker hosting it is running them; it takes no work yet
WARMUP_WARM = "warm"  # a worker that ran them serves it
WARMUP_PENDING = "pending"  # shapes are listed but no worker hosts the model now
# Every worker serving it hosts it cold (residency limits): its shapes run again at its next
# load, inside the batch that loads it, since compiled graphs go with evicted weights.
WARMUP_COLD = "cold"


def exceeds(limit_field: str, limit: float) -> str:
    """The end of a refusal of a value past `limit_field`, which says so when the limit is
    unset: a 0 limit refuses every value, and only naming the field says which to set."""
    if limit == 0:
        return f"exceeds {limit_field}, which is unset (0); set {limit_field}"
    return f"exceeds {limit_field} ({limit})"


# The warm-up shape fields each modality's requests carry; the others it never uses.
SHAPE_FIELDS = {
    "image": ("width", "height"),
    "video": ("width", "height", "num_frames"),
    "audio": ("duration_s",),
}
_SIZE_FIELDS = ("width", "height", "num_frames", "duration_s")


def check_warmup(spec: Any) -> None:
    """ValueError naming `warmup[i].field` when a shape sets a field the entry's modality
    does not use, or is outside the entry's limits."""
    limits = spec.limits
    used = SHAPE_FIELDS.get(spec.modality, _SIZE_FIELDS)
    for index, shape in enumerate(spec.warmup):
        # Before the limits: a field the modality ignores has no limit worth setting.
        for field in _SIZE_FIELDS:
            if field not in used and getattr(shape, field):
                raise ValueError(
                    f"warmup[{index}].{field}: {spec.modality} models take no {field} "
                    f"({'an' if spec.modality[0] in 'aeiou' else 'a'} {spec.modality} shape sets "
                    f"{', '.join(used)}); remove it"
                )
        checks = [
            ("steps", shape.steps, "limits.max_steps", limits.max_steps),
            ("batch", shape.batch, "batching.max_batch", spec.batching.max_batch),
            ("width", shape.width, "limits.max_width", limits.max_width),
            ("height", shape.height, "limits.max_height", limits.max_height),
            ("num_frames", shape.num_frames, "limits.max_num_frames", limits.max_num_frames),
            ("duration_s", shape.duration_s, "limits.max_duration_s", limits.max_duration_s),
        ]
        for field, value, limit_field, limit in checks:
            if value > limit:
                raise ValueError(f"warmup[{index}].{field}: {value} {exceeds(limit_field, limit)}")
        for field in ("width", "height"):
            value = getattr(shape, field)
            if value % limits.size_multiple:
                raise ValueError(
                    f"warmup[{index}].{field}: {value} is not a multiple of "
                    f"limits.size_multiple ({limits.size_multiple})"
                )
        if shape.num_frames and (shape.num_frames - 1) % limits.frame_multiple:
            raise ValueError(
                f"warmup[{index}].num_frames: (num_frames - 1) must be a multiple of "
                f"limits.frame_multiple ({limits.frame_multiple})"
            )


def warmup_label(spec: Any, served: bool, warming: bool, loaded: bool = True) -> str:
    """ModelInfo.warmup: `served` when a worker routes the model now, `warming` when one
    is still running its shapes, `loaded` when a worker serving it holds its weights."""
    if not spec.warmup:
        return WARMUP_NONE
    if served:
        return WARMUP_WARM if loaded else WARMUP_COLD
    return WARMUP_WARMING if warming else WARMUP_PENDING
