"""GenerateRequest as the pure request fields every service validates."""

from __future__ import annotations

from typing import Any

from mediamesh.common.adapters import AdapterRequest
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.params import RequestFields


def request_fields(request: common_pb2.GenerateRequest) -> RequestFields:
    """The request's fields as RequestFields; optional fields the caller did not set are None."""

    def opt(name: str) -> Any:
        return getattr(request, name) if request.HasField(name) else None

    return RequestFields(
        model=request.model,
        prompt=request.prompt,
        negative_prompt=request.negative_prompt,
        steps=opt("steps"),
        seed=opt("seed"),
        width=opt("width"),
        height=opt("height"),
        num_frames=opt("num_frames"),
        guidance_scale=opt("guidance_scale"),
        duration_s=opt("duration_s"),
        output_format=request.output_format,
        output_quality=opt("output_quality"),
        fps=opt("fps"),
        cache=opt("cache"),
        preview_every_steps=opt("preview_every_steps"),
        priority=priority_name(request.priority),
        timeout_ms=opt("timeout_ms"),
        image=request.image or None,
        mask_image=request.mask_image or None,
        image_id=request.image_id,
        mask_image_id=request.mask_image_id,
        strength=opt("strength"),
        adapters=tuple(
            AdapterRequest(a.name, a.scale if a.HasField("scale") else None)
            for a in request.adapters
        ),
    )


def priority_name(value: int) -> str:
    """The Priority enum name for `value`: unset is STANDARD, an unknown number is `#<value>`."""
    if value == common_pb2.PRIORITY_UNSPECIFIED:
        return "STANDARD"
    try:
        return common_pb2.Priority.Name(value)
    except ValueError:
        return f"#{value}"
