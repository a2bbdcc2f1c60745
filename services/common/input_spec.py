"""Which input images a registry entry's model takes, read from its pipeline's call.

An entry may list `inputs: [image, mask_image]`; left out, the list is what the pipeline's
`__call__` takes (an `image` parameter: image-to-image, inpainting or a first video frame;
a `mask_image` parameter: inpainting). Every input a model lists is required: a request
for an img2img model without its image cannot run.
"""

from __future__ import annotations

from typing import Literal

from mediamesh.common.pipeline_fields import call_parameters

InputName = Literal["image", "mask_image"]
INPUT_NAMES: tuple[InputName, ...] = ("image", "mask_image")


def pipeline_inputs(pipeline: str) -> tuple[InputName, ...] | None:
    """The inputs `pipeline.__call__` takes, or None when its signature is unknown."""
    parameters = call_parameters(pipeline)
    if parameters is None:
        return None
    return tuple(name for name in INPUT_NAMES if name in parameters)


def check_inputs(pipeline: str, inputs: tuple[InputName, ...]) -> None:
    """ValueError when an entry lists inputs its pipeline cannot take."""
    if "mask_image" in inputs and "image" not in inputs:
        raise ValueError("inputs: mask_image needs image (a mask belongs to an image)")
    takes = pipeline_inputs(pipeline)
    if takes is None:
        return
    beyond = [name for name in inputs if name not in takes]
    if beyond:
        raise ValueError(
            f"inputs: {pipeline} takes no {', '.join(beyond)} "
            f"(it takes {', '.join(takes) or 'no input images'})"
        )
