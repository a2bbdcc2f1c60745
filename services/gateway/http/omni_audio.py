"""Text-to-audio as vLLM-Omni serves it: POST /v1/audio/generate answers with the audio file.

vLLM-Omni's Audio Generate API (its docs: serving/audio_generate_api) is what clients of
diffusion audio models such as Stable Audio already call; here it runs one job of a mesh
audio model and answers, when the job ends, with its bytes and their content type.

Its fields map onto the job's: `input` is the prompt, `audio_length` the duration in
seconds, `num_inference_steps` the steps, and `negative_prompt`, `guidance_scale` and `seed`
are the job's own; `response_format` is the result's format among those the model allows
(wav, flac, ogg, mp3, opus or aac; vLLM-Omni's pcm, headerless samples whose rate and
channels a client cannot read from them, is refused, naming the ones allowed).
`speed` other than 1 and `audio_start` other than 0 ask for what the mesh's models do not
do (playback at another rate, a clip that starts later) and are refused; so is any field
the route does not know. The mesh's `priority` may ride along. Errors name the field as the
client sent it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.output_formats import FORMATS_BY_MODALITY, MIME_TYPES
from mediamesh.gateway import metrics
from mediamesh.gateway.api.json_plane import request_from_json
from mediamesh.gateway.http.bodies import read_model
from mediamesh.gateway.http.context import Authorization, context_of
from mediamesh.gateway.http.openai_common import (
    admitted,
    answered_or_cancelled,
    check_known_fields,
    final_event,
    follow_all,
    mesh_fields,
    openai_names,
    pick_model,
    result_bytes,
)
from mediamesh.gateway.http.schemas import ErrorBody

router = APIRouter(tags=["audio"])
# The job's fields this route sets from the request's, as its errors name them.
AUDIO_NAMES = {
    "prompt": "input:",
    "duration_s": "audio_length:",
    "steps": "num_inference_steps:",
    "output_format": "response_format:",
}
AUDIO_FIELDS = (
    "input", "model", "response_format", "speed", "audio_length", "audio_start",
    "negative_prompt", "guidance_scale", "num_inference_steps", "seed",
)  # fmt: skip
AUDIO_MESH_FIELDS = ("priority",)
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 413, 429, 503)
}


class AudioGeneration(BaseModel):
    """vLLM-Omni's audio generation request, plus the mesh's priority."""

    # Any other field is refused by `check_known_fields`, naming it.
    # Strict: JSON's own types only, as /v1/jobs takes them (a lax model reads `"seed": true`
    # as seed 1 and `"n": "2"` as 2).
    model_config = ConfigDict(extra="allow", strict=True)

    input: str = Field(description="What the audio should sound like")
    model: str | None = Field(None, description="A mesh audio model; default: the first")
    response_format: str | None = Field(
        None,
        description="wav, flac, ogg, mp3, opus or aac, as the model allows; default: the model's",
    )
    speed: float | None = Field(None, description="1: the mesh plays audio at its own speed")
    audio_length: float | None = Field(None, description="Seconds; default: the model's")
    audio_start: float | None = Field(None, description="0: clips start at the beginning")
    negative_prompt: str | None = None
    guidance_scale: float | None = None
    num_inference_steps: int | None = None
    seed: int | None = None
    priority: str | None = None


@router.post(
    "/v1/audio/generate",
    response_class=Response,
    responses={
        200: {"content": {MIME_TYPES[fmt]: {} for fmt in FORMATS_BY_MODALITY["audio"]}},
        **ERRORS,
    },
    summary="Generate audio (vLLM-Omni-compatible)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": AudioGeneration.model_json_schema()}},
        }
    },
)
async def generate_audio(request: Request, authorization: Authorization = None) -> Response:
    """Runs one job of the input with an audio model and answers with the audio file."""
    context = context_of(request)
    plane = context.plane
    caller = plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals() as asked:
        body = await read_model(request, AudioGeneration, context.max_body_bytes)
        check_known_fields(
            body.model_extra or {}, "audio generation", AUDIO_FIELDS, AUDIO_MESH_FIELDS
        )
        _check_unoffered(body)
        model = await pick_model(plane, caller, body.model, "audio")
        asked.queue = "audio"
        fields = {
            "model": model["name"],
            "prompt": body.input,
            "output_format": body.response_format,
            "duration_s": body.audio_length,
            "steps": body.num_inference_steps,
            "negative_prompt": body.negative_prompt,
            "guidance_scale": body.guidance_scale,
            "seed": body.seed,
            "priority": body.priority,
        }
        with openai_names(AUDIO_NAMES):
            generate = request_from_json(mesh_fields(fields))
    with (
        openai_names(AUDIO_NAMES),
        admitted(plane.tenancy, caller, model, body.priority, 1) as paid,
    ):
        jobs = await follow_all(plane, caller, [plane.follow(generate, paid)])

    async def audio() -> Response:
        event, inline = await final_event(plane, jobs[0], caller)
        data = inline if inline is not None else await result_bytes(plane, jobs[0].job_id, caller)
        return Response(data, media_type=str(event.get("mime_type", "")))

    # A job's own refusal (its worker's: a prompt past the tokenizer) names a field too.
    with openai_names(AUDIO_NAMES):
        return await answered_or_cancelled(request, plane, caller, jobs, audio())


def _check_unoffered(body: AudioGeneration) -> None:
    """InvalidArgument for `speed` or `audio_start` set to a value that asks for more than
    the mesh's audio models do; unset and the values that change nothing pass."""
    if body.speed is not None and body.speed != 1.0:
        raise InvalidArgument(
            f"speed: {body.speed:g} is not offered; audio comes at the model's own speed, "
            "so send 1 or leave it unset"
        )
    if body.audio_start is not None and body.audio_start != 0.0:
        raise InvalidArgument(
            f"audio_start: {body.audio_start:g} is not offered; the mesh's audio models "
            "make a clip from its beginning, so send 0 or leave it unset"
        )
