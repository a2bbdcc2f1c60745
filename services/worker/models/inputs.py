"""A job's input images as the pipeline call takes them: read, checked, decoded.

Inline inputs came inside the JobSpec; larger ones are read from the artifact store that
the scheduler wrote them to. Either way the bytes must hash to the SHA-256 the scheduler
sent, and the header is checked against the model's pixel limit before anything is decoded
(`common.input_images`), so a worker never decodes more than its registry allows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generation import InputImage
from mediamesh.common.input_images import decode_image
from mediamesh.common.input_refs import inline_bytes, is_inline
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobParams

# The mode each input is handed over in: colour pictures, single-channel masks.
_MODES = {"image": "RGB", "mask_image": "L"}


class InputUnreadable(MeshError):
    """An input image the worker cannot read or whose bytes are not the ones sent."""

    code = StatusCode.DATA_LOSS


def read_input(field: str, image: InputImage) -> bytes:
    """The input's bytes, checked against its SHA-256; InputUnreadable otherwise."""
    try:
        data = inline_bytes(image.ref) if is_inline(image.ref) else Path(image.ref).read_bytes()
    except (OSError, ValueError) as exc:
        raise InputUnreadable(f"{field}: cannot read the job's input ({exc})") from None
    digest = hashlib.sha256(data).hexdigest()
    if image.sha256 and digest != image.sha256:
        raise InputUnreadable(
            f"{field}: the stored input hashes to {digest}, not {image.sha256}; it changed"
        )
    return data


def load_input(spec: ModelSpec, field: str, image: InputImage) -> Image.Image:
    """The input decoded in the mode its pipeline argument wants."""
    decoded = decode_image(field, read_input(field, image), spec.limits.max_input_pixels)
    return decoded.convert(_MODES[field])


def image_arguments(
    spec: ModelSpec, takes: Mapping[str, Any], jobs: list[JobParams]
) -> dict[str, Any]:
    """The call's `image`, `mask_image` (one per job) and `strength` for one group.

    Jobs of a group share their inputs' size, whether they have a mask, and the strength
    (the scheduler's batch key holds all three), so the first job's strength is the group's.
    """
    first = jobs[0].generation
    arguments: dict[str, Any] = {}
    for field in ("image", "mask_image"):
        images = [getattr(job.generation, field) for job in jobs]
        if field not in takes or all(image is None for image in images):
            continue
        missing = [job.job_id for job, image in zip(jobs, images, strict=True) if image is None]
        if missing:
            raise InputUnreadable(f"{field}: jobs {', '.join(missing)} of the group have none")
        arguments[field] = [load_input(spec, field, image) for image in images if image]
    if "image" in arguments and "strength" in takes and first.strength:
        arguments["strength"] = first.strength
    return arguments
