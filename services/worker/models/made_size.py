"""A picture made at another size than the job asked for fails the job, naming the cause.

A pipeline rounds a width or height it cannot make down to its own multiple (Flux to 16,
most others to 8) and says so only in a log line. When a registry entry's
`limits.size_multiple` is finer than the pipeline's, a request the gateway accepted would
come back smaller than asked, without a word; the result is refused instead. The load
already refuses a multiple finer than the one the model's config gives (`model_multiple`);
this catches rounding a config does not say, such as Flux's 2x2 latent packing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mediamesh.common.errors import FailedPrecondition
from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec


def check_made_size(spec: ModelSpec, output: Any, generation: GenerationParams) -> None:
    """FailedPrecondition when `output` (an HxWxC image or FxHxWxC frames) is not the
    width and height the job asked for; nothing for audio, a model whose size follows its
    input image, or a job without a size."""
    sized = {"width", "height"} <= spec.accepted_fields
    if spec.modality == "audio" or not sized or not (generation.width and generation.height):
        return
    shape = np.shape(output)
    if len(shape) < 3:
        return
    height, width = shape[-3], shape[-2]
    if (width, height) == (generation.width, generation.height):
        return
    raise FailedPrecondition(
        f"width: model {spec.name!r} made {width}x{height} where "
        f"{generation.width}x{generation.height} was asked: {spec.pipeline} rounds sizes to "
        f"a coarser multiple than its registry entry's limits.size_multiple "
        f"({spec.limits.size_multiple}); set it to the pipeline's"
    )
