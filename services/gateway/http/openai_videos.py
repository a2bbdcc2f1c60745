"""OpenAI-compatible videos, asynchronous as OpenAI's are: POST /v1/videos starts a job,
GET /v1/videos/{id} reads it, GET /v1/videos/{id}/content fetches the video, DELETE cancels.

A video's id is its job id. `seconds` becomes `num_frames` at `fps` frames per second (8
unless the request sets `fps`). The video object is built from the scheduler's GetJob alone
(the job's prompt, width, height, frames and fps), so every gateway replica, and one
restarted since, answers the same; `seconds` is the clip's real length, frames / fps, which
rounding to whole frames may make differ slightly from what was asked.
DELETE cancels a job that has not ended; the stored artifact is removed by retention.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.api.json_plane import JsonObject, request_from_form
from mediamesh.gateway.http.bodies import is_form, read_form, read_json
from mediamesh.gateway.http.context import Authorization, context_of
from mediamesh.gateway.http.openai_common import parse_size, pick_model, require_image_input
from mediamesh.gateway.http.results import result_response
from mediamesh.gateway.http.schemas import ErrorBody

router = APIRouter(tags=["openai"])
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 429, 503)
}
DEFAULT_FPS = 8
_STATUS = {
    "QUEUED": "queued",
    "DISPATCHED": "queued",
    "RUNNING": "in_progress",
    "SUCCEEDED": "completed",
}
_VIDEO_FIELDS = {"prompt", "model", "seconds", "size", "input_reference"}
_VIDEO_SCHEMA = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "prompt": {"type": "string"},
        "model": {"type": "string"},
        "seconds": {"type": "string", "description": "Clip length; frames = seconds x fps"},
        "size": {"type": "string", "description": "WIDTHxHEIGHT"},
        "input_reference": {"type": "string", "format": "binary"},
    },
}


class VideoError(BaseModel):
    """Why a video failed (CANCELLED after DELETE)."""

    code: str
    message: str


class VideoObject(BaseModel):
    """OpenAI's Video object."""

    id: str
    object: str = "video"
    model: str
    status: str = Field(description="queued, in_progress, completed or failed")
    progress: int = Field(description="Percent of denoising steps done")
    created_at: int
    completed_at: int | None
    expires_at: int | None
    error: VideoError | None
    prompt: str | None
    seconds: str
    size: str
    remixed_from_video_id: str | None


class VideoDeleted(BaseModel):
    """The answer to DELETE."""

    id: str
    object: str = "video.deleted"
    deleted: bool


@router.post(
    "/v1/videos",
    responses={**ERRORS, 200: {"model": VideoObject}},
    summary="Create a video (OpenAI-compatible)",
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {"schema": _VIDEO_SCHEMA},
                "application/json": {"schema": _VIDEO_SCHEMA},
            }
        }
    },
)
async def create_video(request: Request, authorization: Authorization = None) -> JsonObject:
    """Starts a video job; answers with the video object (status `queued`)."""
    context = context_of(request)
    plane = context.plane
    caller = plane.caller(authorization)
    if is_form(request):
        form, files = await read_form(request, context.max_body_bytes)
    else:
        body = await read_json(request, context.max_body_bytes)
        if not isinstance(body, dict):
            raise InvalidArgument("body: expected a JSON object")
        form = {k: v if isinstance(v, str) else str(v) for k, v in body.items() if v is not None}
        files = {}
    prompt = form.pop("prompt", None)
    if not prompt:
        raise InvalidArgument("prompt: required")
    model = await pick_model(plane, form.pop("model", None), "video")
    size = form.pop("size", None)
    seconds = form.pop("seconds", None)
    fields: dict[str, str] = {"model": model["name"], "prompt": prompt}
    fields.update({k: str(v) for k, v in parse_size(size).items()})
    if seconds is not None:
        fps = int(form.get("fps") or DEFAULT_FPS)
        fields.update(num_frames=str(round(_seconds(seconds) * fps)), fps=str(fps))
    parts = {}
    if "input_reference" in files:
        require_image_input(model)
        parts["image"] = files.pop("input_reference")
    generate = request_from_form({**form, **fields}, {**files, **parts})
    return _video(await plane.submit(generate, caller))


@router.get(
    "/v1/videos/{video_id}",
    responses={**ERRORS, 200: {"model": VideoObject}},
    summary="A video (OpenAI-compatible)",
)
async def get_video(
    video_id: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """The video's status and progress."""
    plane = context_of(request).plane
    return _video(await plane.job(video_id, plane.reader(authorization)))


@router.get(
    "/v1/videos/{video_id}/content",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"video/mp4": {}}}},
    summary="A video's bytes (OpenAI-compatible)",
)
async def video_content(
    video_id: str,
    request: Request,
    authorization: Authorization = None,
    variant: str = Query("video", description="Only `video` is served"),
) -> Response:
    """The finished video (Range is supported)."""
    if variant != "video":
        raise InvalidArgument(f"variant: {variant[:32]!r} is not served; only video")
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    return await result_response(plane, video_id, caller, request.headers.get("range"))


@router.delete(
    "/v1/videos/{video_id}",
    responses={**ERRORS, 200: {"model": VideoDeleted}},
    summary="Delete (cancel) a video",
)
async def delete_video(
    video_id: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """Cancels the video's job if it has not ended."""
    plane = context_of(request).plane
    await plane.cancel(video_id, plane.reader(authorization))
    return {"id": video_id, "object": "video.deleted", "deleted": True}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f"seconds: {text[:16]!r} is not a number") from None
    if not 0 < value <= 600:
        raise InvalidArgument(f"seconds: {value} is out of range; allowed 0..600")
    return value


def _video(job: JsonObject) -> JsonObject:
    """A job (as `job_view` shows it) as OpenAI's Video object."""
    state = job["state"]
    total = job["total_steps"]
    progress = 100 if state == "SUCCEEDED" else (job["step"] * 100 // total if total else 0)
    error = job.get("error")
    width, height, frames, fps = job["width"], job["height"], job["num_frames"], job["fps"]
    # A job stored before fps was resolved at acceptance has 0: its length is unknown here.
    seconds = f"{frames / fps:g}" if frames and fps else ""
    finished = job.get("finished_unix_ms")
    return {
        "id": job["job_id"],
        "object": "video",
        "model": job["model"],
        "status": _STATUS.get(state, "failed"),
        "progress": progress,
        "created_at": job["created_unix_ms"] // 1000,
        "completed_at": finished // 1000 if finished else None,
        "expires_at": None,
        "error": {"code": error["code"], "message": error["message"]} if error else None,
        "prompt": job["prompt"],
        "seconds": seconds,
        "size": f"{width}x{height}" if width and height else "",
        "remixed_from_video_id": None,
    }
