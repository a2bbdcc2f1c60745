"""The registry's `preview:` section: whether a model offers latent previews, and how.

Pure data, read by request validation (which refuses `preview_every_steps` for a model
without previews), by ListModels (ModelInfo.previews) and by the worker's preview decoder.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, model_validator

# Longest side of a preview in pixels; the worker never makes a larger one.
MAX_PREVIEW_SIDE = 256


class PreviewSpec(BaseModel):
    """How a model's progress previews are decoded from its latents.

    By default every diffusers family has previews, decoded by a linear latent-to-RGB
    projection (the family's factors, or the latents' three principal directions). `vae`
    names a tiny autoencoder (diffusers AutoencoderTiny, e.g. a TAESD checkpoint) to decode
    with instead; `rgb_factors` gives a projection of one's own, one RGB row per channel.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, strict=True)
    # AutoencoderTiny source (a folder, `{models_dir}/...`, or a hub id already cached).
    vae: str | None = Field(None, min_length=1)
    # Per latent channel, its contribution to red, green and blue; empty: the family's own.
    rgb_factors: tuple[tuple[StrictFloat, StrictFloat, StrictFloat], ...] = ()
    # Added to the projected RGB (in -1..1 units) when `rgb_factors` is set.
    rgb_bias: tuple[StrictFloat, StrictFloat, StrictFloat] = (0.0, 0.0, 0.0)

    @model_validator(mode="after")
    def _one_decoder(self) -> PreviewSpec:
        if self.vae is not None and self.rgb_factors:
            raise ValueError("preview: set vae or rgb_factors, not both")
        return self

    @model_validator(mode="after")
    def _bias_with_factors(self) -> PreviewSpec:
        # The family's own projection keeps its own bias; this one would be dropped.
        if self.rgb_bias != (0.0, 0.0, 0.0) and not self.rgb_factors:
            raise ValueError(
                "preview.rgb_bias: applies only to the entry's own preview.rgb_factors; "
                "set rgb_factors too, or remove rgb_bias"
            )
        return self
