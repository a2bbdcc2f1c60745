"""An entry whose `limits.size_multiple` is finer than its model's own is refused at load.

A latent is the picture divided by the VAE's scale factor, and a transformer cuts the
latent into patches: a size that is not a multiple of scale x patch (PixArt: 8 x 2 = 16)
makes a latent the patches do not tile, and the job fails deep in the model with a shape
error. The registry already keeps the default, largest and warm-up sizes on the entry's
multiple, so a multiple that is a multiple of the model's keeps them all legal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError


def check_size_multiple(spec: ModelSpec, pipeline: Any) -> None:
    """ModelLoadError naming `limits.size_multiple` and the multiple the model needs."""
    multiple = spec.limits.size_multiple
    if spec.modality == "audio" or multiple < 1:
        return
    needed = model_size_multiple(pipeline)
    if needed is None or multiple % needed == 0:
        return
    scale, patch = needed_parts(pipeline)
    raise ModelLoadError(
        f"model {spec.name!r} field limits.size_multiple: {multiple} is not a multiple of "
        f"{needed}, which {spec.pipeline} needs (VAE scale factor {scale} x patch size "
        f"{patch}), so a request at an allowed size would fail; set it to {needed} or a "
        f"multiple of it, and keep the default and largest sizes on it"
    )


def model_size_multiple(pipeline: Any) -> int | None:
    """VAE scale factor times the denoiser's spatial patch size; None when the pipeline
    does not say its scale factor."""
    scale, patch = needed_parts(pipeline)
    return scale * patch if scale else None


def needed_parts(pipeline: Any) -> tuple[int, int]:
    """(VAE scale factor, spatial patch size): 0 for a scale the pipeline does not say, 1
    for a denoiser without patches (a UNet)."""
    scale = _positive_int(getattr(pipeline, "vae_scale_factor_spatial", None)) or _positive_int(
        getattr(pipeline, "vae_scale_factor", None)
    )
    return scale, _spatial_patch(pipeline)


def _spatial_patch(pipeline: Any) -> int:
    for role in ("transformer", "unet"):
        config = getattr(getattr(pipeline, role, None), "config", None)
        if config is None:
            continue
        patch = getattr(config, "patch_size", None)
        if _positive_int(patch):
            return _positive_int(patch)
        # Video transformers give (frames, height, width); width and height share the
        # entry's one multiple, so it must suit both.
        if isinstance(patch, Sequence) and len(patch) in (2, 3):
            spatial = [_positive_int(p) for p in patch[-2:]]
            if all(spatial):
                return math.lcm(*spatial)
        return 1
    return 1


def _positive_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
