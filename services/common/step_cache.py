"""A registry entry's step cache: which of diffusers' caches skips transformer work, and how hard.

Each kind maps onto one diffusers cache config (`FirstBlockCacheConfig`,
`TaylorSeerCacheConfig`, `MagCacheConfig`, `FasterCacheConfig`,
`PyramidAttentionBroadcastConfig`); the worker builds it at load. The fields keep
diffusers' names so its documentation applies. Pure: no torch, no diffusers here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

# Timesteps in diffusers' schedulers run from 1000 (noise) down to 0.
TimestepRange = tuple[StrictInt, StrictInt]


class _CacheKind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ordered(field: str, window: TimestepRange | None) -> None:
    if window is not None and window[0] >= window[1]:
        raise ValueError(f"{field}: the first timestep must be below the second, got {window}")


class FirstBlockCache(_CacheKind):
    """Skips all blocks after the first while the first block's residual barely changes."""

    kind: Literal["first-block"]
    # Relative change of the first block's residual below which the rest is skipped.
    threshold: float = Field(0.05, gt=0, strict=True)


class TaylorSeerCache(_CacheKind):
    """Predicts attention outputs between full steps from a Taylor expansion."""

    kind: Literal["taylorseer"]
    # Full computations are this many steps apart; the steps between are predicted.
    cache_interval: int = Field(5, ge=1, strict=True)
    # Steps computed fully at the start, to gather the expansion's factors.
    disable_cache_before_step: int = Field(3, ge=0, strict=True)
    # Steps from here on are computed fully again (None: never).
    disable_cache_after_step: int | None = Field(None, ge=0, strict=True)
    max_order: int = Field(1, ge=0, le=4, strict=True)
    use_lite_mode: bool = Field(False, strict=True)


class MagCache(_CacheKind):
    """Skips whole steps while the accumulated magnitude-ratio error stays small."""

    kind: Literal["mag"]
    threshold: float = Field(0.06, gt=0, strict=True)
    max_skip_steps: int = Field(3, ge=1, strict=True)
    # The first fraction of steps is never skipped.
    retention_ratio: float = Field(0.2, ge=0, le=1, strict=True)
    # Per-step magnitude ratios of the checkpoint; "flux" takes diffusers' FLUX table.
    # They are stretched to each request's step count.
    mag_ratios: Literal["flux"] | tuple[StrictFloat, ...] = "flux"

    @model_validator(mode="after")
    def _ratios_present(self) -> MagCache:
        if isinstance(self.mag_ratios, tuple) and len(self.mag_ratios) < 2:
            raise ValueError("mag_ratios: needs at least two values (or 'flux')")
        return self


class FasterCache(_CacheKind):
    """Reuses attention states between steps and the unconditional branch of CFG."""

    kind: Literal["faster"]
    spatial_attention_block_skip_range: int = Field(2, ge=1, strict=True)
    spatial_attention_timestep_skip_range: TimestepRange = (-1, 681)
    unconditional_batch_skip_range: int = Field(5, ge=1, strict=True)
    unconditional_batch_timestep_skip_range: TimestepRange = (-1, 641)
    alpha_low_frequency: float = Field(1.1, gt=0, strict=True)
    alpha_high_frequency: float = Field(1.1, gt=0, strict=True)
    # Layout of the latents the denoiser takes, used to split frames of the CFG branches.
    tensor_format: Literal["BCFHW", "BFCHW", "BCHW"] = "BCFHW"

    @model_validator(mode="after")
    def _windows(self) -> FasterCache:
        for field in (
            "spatial_attention_timestep_skip_range",
            "unconditional_batch_timestep_skip_range",
        ):
            _ordered(field, getattr(self, field))
        return self


class PyramidAttentionBroadcast(_CacheKind):
    """Broadcasts attention outputs to the next steps inside a timestep window."""

    kind: Literal["pab"]
    # Attention is recomputed every N steps inside its window (None: that kind is not cached).
    spatial_attention_block_skip_range: int | None = Field(2, ge=1, strict=True)
    temporal_attention_block_skip_range: int | None = Field(None, ge=1, strict=True)
    cross_attention_block_skip_range: int | None = Field(None, ge=1, strict=True)
    spatial_attention_timestep_skip_range: TimestepRange = (100, 800)
    temporal_attention_timestep_skip_range: TimestepRange = (100, 800)
    cross_attention_timestep_skip_range: TimestepRange = (100, 800)

    @model_validator(mode="after")
    def _windows(self) -> PyramidAttentionBroadcast:
        for name in ("spatial", "temporal", "cross"):
            field = f"{name}_attention_timestep_skip_range"
            _ordered(field, getattr(self, field))
        ranges = (
            self.spatial_attention_block_skip_range,
            self.temporal_attention_block_skip_range,
            self.cross_attention_block_skip_range,
        )
        if all(value is None for value in ranges):
            raise ValueError("set at least one *_attention_block_skip_range")
        return self


StepCacheSpec = Annotated[
    FirstBlockCache | TaylorSeerCache | MagCache | FasterCache | PyramidAttentionBroadcast,
    Field(discriminator="kind"),
]
CACHE_KINDS = ("first-block", "taylorseer", "mag", "faster", "pab")
