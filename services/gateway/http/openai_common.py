"""What the OpenAI-compatible routes share: sizes, model choice, waiting for a job's end."""

from __future__ import annotations

import re
from typing import Any

from mediamesh.common.errors import InvalidArgument, MeshError, StatusCode
from mediamesh.gateway.api.json_plane import JsonObject, JsonPlane
from mediamesh.gateway.core.tenancy import Caller

_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")


def parse_size(size: str | None, field: str = "size") -> dict[str, int]:
    """`WxH` as width and height; nothing for None or "auto" (the model's default size)."""
    if size is None or size == "auto":
        return {}
    match = _SIZE.fullmatch(size)
    if match is None:
        raise InvalidArgument(f"{field}: {size[:32]!r} is not WIDTHxHEIGHT (e.g. 512x512) or auto")
    return {"width": int(match[1]), "height": int(match[2])}


async def pick_model(plane: JsonPlane, name: str | None, modality: str) -> JsonObject:
    """The named model (its ModelInfo fields), or the first ready model of `modality`."""
    models = await plane.models()
    if name:
        for model in models:
            if model["name"] == name:
                return model
        known = ", ".join(m["name"] for m in models)
        raise MeshError(f"model: {name!r} is not served; known: {known}", code=StatusCode.NOT_FOUND)
    fitting = [m for m in models if m["modality"] == modality]
    ready = [m for m in fitting if m.get("ready")] or fitting
    if not ready:
        raise InvalidArgument(f"model: required; this mesh serves no {modality} model")
    return ready[0]


def require_image_input(model: JsonObject) -> None:
    """InvalidArgument unless the model takes an input image."""
    if "image" not in model.get("inputs", []):
        raise InvalidArgument(f"image: model {model['name']!r} takes no image input")


async def final_event(plane: JsonPlane, job_id: str, caller: Caller) -> JsonObject:
    """The job's result event; its error (with the job's code) raises MeshError."""
    async for event in plane.events(job_id, caller):
        if event["kind"] == "result":
            return event
        if event["kind"] == "error":
            code = StatusCode.parse(event["code"])
            raise MeshError(event["message"] or f"job {job_id} failed", code=code)
    raise MeshError(f"job {job_id}: its event stream ended early", code=StatusCode.UNAVAILABLE)


async def result_bytes(plane: JsonPlane, job_id: str, caller: Caller) -> bytes:
    """The whole result of a finished job."""
    return b"".join([chunk.data async for chunk in plane.download(job_id, caller)])


def mesh_fields(extra: dict[str, Any]) -> JsonObject:
    """The mesh's own GenerateRequest fields a client passed beside OpenAI's (extra_body)."""
    return {k: v for k, v in extra.items() if v is not None}
