"""OpenAI-compatible videos, asynchronous as OpenAI's are: POST /v1/videos starts a job,
GET /v1/videos/{id} reads it, GET /v1/videos/{id}/content fetches the video, DELETE cancels
or deletes it.

A video's id is its job id. `seconds` becomes `num_frames`: the fewest frames the model
accepts (its `frame_multiple` rule: Wan's VAE needs 4k + 1, CogVideoX's 8k + 1) that last at
least `seconds` at `fps` frames per second (the model's own unless the request sets `fps`).
The video object is built from the scheduler's GetJob alone (the job's prompt, width,
height, frames and fps), so every gateway replica, and one restarted since, answers the same;
its `seconds` is the clip's real length, frames / fps, so 1 s asked of wan-tiny reads 1.125.
Without `seconds` the clip has the model's own default length (its registry entry's
num_frames at its fps: 0.625 s on wan-tiny), not OpenAI's 4 s, which a small model may not
even reach; the video object's `seconds` says the length made. Send `seconds` for a length.

A video's id is its job's, but errors about it name `video_id`, the OpenAI path's name.

DELETE of a video that has not ended cancels it and answers `deleted: true`: no video will be
made (the object stays readable, failed with error CANCELLED, until a DELETE of it as an
ended video). DELETE of an ended video deletes its job (DeleteJob): its content and its
object go, and the id answers 404 from then on.
GET /v1/videos lists the caller's jobs of the registry's video models, a page at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from mediamesh.common.errors import InvalidArgument, NotFound
from mediamesh.common.job_states import ENDED_STATE_NAMES
from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.common.output_formats import FPS_RANGE
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway import metrics
from mediamesh.gateway.api.json_plane import (
    JobListing,
    JsonObject,
    JsonPlane,
    list_page,
    request_from_form,
    request_from_json,
)
from mediamesh.gateway.core.json_kinds import json_kind
from mediamesh.gateway.core.tenancy import Caller
from mediamesh.gateway.http.bodies import FORMS, JSON, media_type, read_form, read_json
from mediamesh.gateway.http.context import Authorization, context_of
from mediamesh.gateway.http.errors import renamed_fields, state_conflicts
from mediamesh.gateway.http.openai_common import (
    SIZE_NAMES,
    adopt_steps_alias,
    check_size_alone,
    openai_names,
    parse_size,
    pick_model,
)
from mediamesh.gateway.http.queries import QueryParameters, check_query
from mediamesh.gateway.http.results import result_response
from mediamesh.gateway.http.schemas import ErrorBody

router = APIRouter(tags=["openai"])
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 429, 503)
}
# The mesh's fields this route sets from OpenAI's, as their errors name them. num_frames is
# not among them: `seconds` is checked against the frame limit before it becomes frames, and
# a num_frames the client set itself (extra_body) keeps its own name.
VIDEO_NAMES = {**SIZE_NAMES, "image": "input_reference:"}
# What the mesh's errors about a job say when the job is a video, as the OpenAI paths name it.
VIDEO_ID_NAMES = {"job_id": "video_id:"}
_STATUS = {
    "QUEUED": "queued",
    "DISPATCHED": "queued",
    "RUNNING": "in_progress",
    "SUCCEEDED": "completed",
}
LIST_VIDEOS_QUERY = QueryParameters(once=("limit", "after", "order"))
VIDEO_CONTENT_QUERY = QueryParameters(once=("variant",))
# The listing's fields as its query parameters name them, for the errors the mesh raises.
LISTING_NAMES = {"after_job_id": "after:", "page_size": "limit:"}
# OpenAI's text fields of a create-video request; input_reference is its one file.
_OPENAI_TEXT_FIELDS = ("prompt", "model", "size", "seconds")
_VIDEO_SCHEMA = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "prompt": {"type": "string"},
        "model": {"type": "string"},
        "seconds": {
            "type": "string",
            "description": "Clip length: the fewest frames the model accepts lasting this "
            "long; unset: the model's own default length (not OpenAI's 4 s)",
        },
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


class VideoList(BaseModel):
    """A page of videos, in OpenAI's list shape."""

    object: str = "list"
    data: list[VideoObject]
    has_more: bool
    first_id: str | None
    last_id: str | None


class VideoDeleted(BaseModel):
    """The answer to DELETE: a video that had not ended is cancelled (no video will be made),
    an ended one is deleted with its content."""

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
    caller = plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals() as counted:
        if media_type(request, (JSON, *FORMS)) == JSON:
            asked = _asked_in_json(await read_json(request, context.max_body_bytes))
        else:
            asked = _asked_in_form(*await read_form(request, context.max_body_bytes))
        if not asked.prompt:
            raise InvalidArgument("prompt: required")
        inputs = {"image": "input_reference"} if asked.image is not None else {}
        model = await pick_model(plane, caller, asked.model, "video", inputs)
        counted.queue = "video"
        fields: JsonObject = {"model": model["name"], "prompt": asked.prompt}
        check_size_alone(asked.size, asked.mesh)
        fields.update(parse_size(asked.size, model))
        if asked.seconds is not None:
            if "num_frames" in asked.mesh:
                raise InvalidArgument("seconds: set seconds or num_frames, not both")
            spec = plane.spec(model["name"])
            fps = _fps(asked.mesh.get("fps"), spec)
            fields.update(num_frames=frames_for(asked.seconds, fps, spec), fps=fps)
        step_names = adopt_steps_alias(asked.mesh)
        merged = {**asked.mesh, **fields}
        with openai_names({**VIDEO_NAMES, **step_names}):
            # Each body parsed as /v1/jobs parses it: JSON values keep their JSON types.
            if asked.is_form:
                generate = request_from_form(_form_texts(merged), asked.parts)
            else:
                generate = request_from_json(merged)
    with openai_names({**VIDEO_NAMES, **step_names}):
        return _video(await plane.submit(generate, caller))


@dataclass(frozen=True)
class _AskedVideo:
    """A create-video request: OpenAI's fields, and the mesh's own beside them (`mesh`: text
    from a form, JSON values from a JSON body, each read as /v1/jobs reads that body)."""

    prompt: str | None
    model: str | None
    size: str | None
    seconds: str | None
    mesh: JsonObject
    # input_reference, as the model's `image`; other file parts of a form.
    image: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    is_form: bool = False

    @property
    def parts(self) -> dict[str, bytes]:
        """A form's file parts by the mesh's names."""
        return {**self.files, **({"image": self.image} if self.image is not None else {})}


def _asked_in_form(form: dict[str, str], files: dict[str, bytes]) -> _AskedVideo:
    prompt, model, size, seconds = (form.pop(name, None) for name in _OPENAI_TEXT_FIELDS)
    image = files.pop("input_reference", None)
    if image is not None and "image" in files:
        # Both are the model's `image`: keeping one would drop the other without a word.
        raise InvalidArgument(
            "input_reference: set input_reference or image, not both; they are the same input"
        )
    return _AskedVideo(prompt, model, size, seconds, form, image, files, is_form=True)


def _asked_in_json(body: object) -> _AskedVideo:
    """A JSON body's fields: OpenAI's as text (InvalidArgument naming one of another JSON
    type), the rest kept as sent, for the JSON parser of /v1/jobs to check."""
    if not isinstance(body, dict):
        raise InvalidArgument("body: expected a JSON object")
    if "input_reference" in body:
        raise InvalidArgument(
            "input_reference: send the image as a file part of a multipart/form-data body "
            "(as the openai client does); a JSON body cannot carry a file"
        )
    prompt, model, size, seconds = (
        _json_text(name, body.pop(name, None)) for name in _OPENAI_TEXT_FIELDS
    )
    return _AskedVideo(prompt, model, size, seconds, body)


def _json_text(name: str, value: object) -> str | None:
    """An OpenAI text field of a JSON body; `seconds` may also be a JSON number, which is
    what it stands for. None for null or absent."""
    if value is None or isinstance(value, str):
        return value
    if name == "seconds" and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise InvalidArgument(f"{name}: expected a string, got {json_kind(value)}")


def _form_texts(fields: JsonObject) -> dict[str, str]:
    """Fields as form text: the numbers the route computed (width, num_frames) as digits."""
    return {k: v if isinstance(v, str) else str(v) for k, v in fields.items()}


@router.get(
    "/v1/videos",
    responses={**ERRORS, 200: {"model": VideoList}},
    summary="List videos (OpenAI-compatible)",
)
async def list_videos(
    request: Request,
    authorization: Authorization = None,
    limit: int = Query(20, ge=1, le=MAX_JOB_PAGE_SIZE, description="Videos in one page"),
    after: str | None = Query(None, min_length=1, description="The previous page's last_id"),
    order: Literal["desc", "asc"] = Query("desc", description="By creation time"),
) -> JsonObject:
    """The caller's videos (jobs of the mesh's video models), newest first unless `order`
    is `asc`; a video is listed until the scheduler's retention forgets it."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    check_query(request, LIST_VIDEOS_QUERY)
    models = plane.model_names("video")
    if not models:
        return list_page([], False, "id")
    listing = JobListing([], models, limit, after, order == "asc")
    with renamed_fields(LISTING_NAMES):
        jobs, has_more = await plane.jobs(listing, caller)
    return list_page([_video(job) for job in jobs], has_more, "id")


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
    return _video(await _video_job(plane, video_id, plane.reader(authorization)))


@router.get(
    "/v1/videos/{video_id}/content",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"video/mp4": {}}}},
    summary="A video's bytes (OpenAI-compatible)",
)
@router.head(
    "/v1/videos/{video_id}/content",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"video/mp4": {}}}},
    summary="A video's headers: those a GET answers with, without the bytes",
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
    check_query(request, VIDEO_CONTENT_QUERY)
    await _video_job(plane, video_id, caller)
    head = request.method == "HEAD"
    wanted, cached = request.headers.get("range"), request.headers.get("if-none-match")
    same = request.headers.get("if-range")
    with renamed_fields(VIDEO_ID_NAMES):
        return await result_response(plane, video_id, caller, wanted, head, cached, same)


@router.delete(
    "/v1/videos/{video_id}",
    response_model=VideoDeleted,
    responses={**ERRORS, 409: {"model": ErrorBody}},
    summary="Delete a video: cancel one that has not ended, delete an ended one",
)
async def delete_video(
    video_id: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """Cancels the video's job if it has not ended; deletes an ended one (its object and
    its content), after which the video is a 404."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    answer = {"id": video_id, "object": "video.deleted", "deleted": True}
    video = await _video_job(plane, video_id, caller)
    with renamed_fields(VIDEO_ID_NAMES), state_conflicts():
        if video["state"] not in ENDED_STATE_NAMES:
            # Decided from the state Cancel answers with: a job that ended on its own since
            # it was read is not CANCELLED, and is deleted as any ended video is.
            cancelled = await plane.cancel(video_id, caller)
            if cancelled["state"] == "CANCELLED":
                return answer
        await plane.delete(video_id, caller)
    return answer


def frames_for(seconds: str, fps: int, spec: ModelSpec) -> int:
    """The fewest frames `spec` accepts that last at least `seconds` at `fps`; InvalidArgument
    naming `seconds` and the model's longest clip when even its most frames fall short."""
    try:
        asked = float(seconds)
    except ValueError:
        raise InvalidArgument(f"seconds: {seconds[:16]!r} is not a number") from None
    if not (math.isfinite(asked) and asked > 0):
        raise InvalidArgument(f"seconds: {seconds[:16]!r} is out of range; allowed 0 < seconds")
    lim = spec.limits
    multiple = lim.frame_multiple
    most = 1 + (lim.max_num_frames - 1) // multiple * multiple
    # Rounded so that 0.1 s at 30 fps is 3 frames, not the 4 that 3.0000000000000004 is.
    length_in_frames = round(asked * fps, 6)
    if length_in_frames > most:
        # Truncated, not rounded: every length the message allows must be served.
        longest = math.floor(most / fps * 1000) / 1000
        raise InvalidArgument(
            f"seconds: {asked:g} is out of range for {spec.name}; allowed 0 < seconds <= "
            f"{longest:g} ({most} frames at {fps} fps)"
        )
    wanted = max(1, math.ceil(length_in_frames))
    return 1 + math.ceil((wanted - 1) / multiple) * multiple


def _fps(value: object, spec: ModelSpec) -> int:
    """The request's frame rate (form text, or a JSON number or string), else the model's."""
    if value is None:
        return spec.output.fps
    low, high = FPS_RANGE
    text = value if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    if text is None or not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise InvalidArgument(f"fps: {str(value)[:16]!r}; allowed a whole number {low}..{high}")
    return int(text)


async def _video_job(plane: JsonPlane, video_id: str, caller: Caller) -> JsonObject:
    """The caller's job `video_id`, if it is a video: these routes neither show, cancel nor
    delete another kind of job, as their list does not list one."""
    with renamed_fields(VIDEO_ID_NAMES):
        job = await plane.job(video_id, caller)
    if job["model"] not in plane.model_names("video"):
        raise NotFound(
            f"video_id: {video_id!r} is a job of {job['model']}, not of a video model; "
            f"it is at /v1/jobs/{video_id}"
        )
    return job


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
        "expires_at": expires // 1000 if (expires := job.get("expires_unix_ms")) else None,
        "error": {"code": error["code"], "message": error["message"]} if error else None,
        "prompt": job["prompt"],
        "seconds": seconds,
        "size": f"{width}x{height}" if width and height else "",
        "remixed_from_video_id": None,
    }
