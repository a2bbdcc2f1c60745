"""The native job API: submit, read, cancel, follow (server-sent events), fetch the result,
delete an ended job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from mediamesh.common.errors import InvalidArgument, MeshError, NotFound
from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.gateway import metrics
from mediamesh.gateway.api.json_plane import (
    JobListing,
    JsonObject,
    JsonPlane,
    generate_request_schema,
    list_page,
    request_from_form,
    request_from_json,
)
from mediamesh.gateway.http.bodies import FORMS, JSON, media_type, read_form, read_json
from mediamesh.gateway.http.context import Authorization, base_url_of, context_of, with_links
from mediamesh.gateway.http.errors import renamed_fields, state_conflicts
from mediamesh.gateway.http.event_ids import EventIds, parse_event_id
from mediamesh.gateway.http.queries import QueryParameters, check_query
from mediamesh.gateway.http.results import result_response
from mediamesh.gateway.http.schemas import (
    EVENTS_DESCRIPTION,
    DeletedJobView,
    ErrorBody,
    JobList,
    JobView,
    ModelList,
)

router = APIRouter(tags=["jobs"])
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 429, 503)
}
# Milliseconds an EventSource waits before reconnecting after the stream drops.
SSE_RETRY_MS = 1000
# Seconds of silence (a long queue) after which the stream sends a comment to stay open.
KEEPALIVE_S = 15.0
LIST_JOBS_QUERY = QueryParameters(repeatable=("state", "model"), once=("limit", "after", "order"))
# The listing's fields as its query parameters name them, for the errors the mesh raises.
LISTING_NAMES = {
    "after_job_id": "after:",
    "page_size": "limit:",
    "models": "model:",
    "states": "state:",
}


def _submit_body() -> dict[str, Any]:
    schema = generate_request_schema()
    multipart = {
        "type": "object",
        "description": "The same fields as form values (numbers and objects as JSON text), "
        "with `image` and `mask_image` as file parts; each field once.",
        "properties": {
            name: {"type": "string", "format": "binary"}
            if prop.get("format") == "byte"
            else {"type": "string"}
            for name, prop in schema["properties"].items()
        },
    }
    return {
        "required": True,
        "content": {
            "application/json": {"schema": schema},
            "multipart/form-data": {"schema": multipart},
        },
    }


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=JobView,
    responses={**ERRORS, 413: {"model": ErrorBody}},
    openapi_extra={"requestBody": _submit_body()},
    summary="Submit a job",
)
async def submit_job(request: Request, authorization: Authorization = None) -> JSONResponse:
    """Submits a GenerateRequest (JSON with bytes as base64, or multipart with file parts) and
    answers 202 with the job at once; follow it with `/events`."""
    context = context_of(request)
    caller = context.plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals() as asked:
        if media_type(request, (JSON, *FORMS)) == JSON:
            body = await read_json(request, context.max_body_bytes)
            asked.queue = context.plane.queue_of(
                body.get("model") if isinstance(body, dict) else None
            )
            generate = request_from_json(body)
        else:
            fields, files = await read_form(request, context.max_body_bytes)
            asked.queue = context.plane.queue_of(fields.get("model"))
            generate = request_from_form(fields, files)
    job = await context.plane.submit(generate, caller)
    return JSONResponse(with_links(job, base_url_of(request)), status_code=202)


@router.get("/v1/jobs", response_model=JobList, responses=ERRORS, summary="List jobs")
async def list_jobs(
    request: Request,
    authorization: Authorization = None,
    state: list[str] = Query([], description="Only jobs in these states (repeat the parameter)"),
    model: list[str] = Query([], description="Only jobs of these models (repeat the parameter)"),
    limit: int = Query(20, ge=1, le=MAX_JOB_PAGE_SIZE, description="Jobs in one page"),
    after: str | None = Query(None, min_length=1, description="The previous page's last_id"),
    order: Literal["desc", "asc"] = Query("desc", description="By acceptance time"),
) -> JsonObject:
    """The caller's jobs (every tenant's for an admin key), newest first, a page at a time;
    a job is listed until the scheduler's retention forgets it."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    check_query(request, LIST_JOBS_QUERY)
    listing = JobListing(state, model, limit, after, order == "asc")
    with renamed_fields(LISTING_NAMES):
        jobs, has_more = await plane.jobs(listing, caller)
    base_url = base_url_of(request)
    return list_page([with_links(job, base_url) for job in jobs], has_more, "job_id")


@router.get("/v1/jobs/{job_id}", response_model=JobView, responses=ERRORS, summary="A job")
@router.head(
    "/v1/jobs/{job_id}", response_model=JobView, responses=ERRORS, summary="A job's headers"
)
async def get_job(job_id: str, request: Request, authorization: Authorization = None) -> JsonObject:
    """The job's state; 404 for a job that is not the caller's."""
    plane = context_of(request).plane
    job = await plane.job(job_id, plane.reader(authorization))
    return with_links(job, base_url_of(request))


@router.delete("/v1/jobs/{job_id}", response_model=JobView, responses=ERRORS, summary="Cancel")
async def cancel_job(
    job_id: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """Cancels the job; answers with its state afterwards (a finished job stays as it was)."""
    plane = context_of(request).plane
    job = await plane.cancel(job_id, plane.reader(authorization))
    return with_links(job, base_url_of(request))


@router.delete(
    "/v1/jobs/{job_id}/record",
    response_model=DeletedJobView,
    responses={**ERRORS, 409: {"model": ErrorBody}},
    summary="Delete an ended job: its result and its record",
)
async def delete_job(
    job_id: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """Deletes an ended job before the scheduler's retention would: its result and its
    record, so that it is a 404 everywhere afterwards. 409 for a job that has not ended
    (`DELETE /v1/jobs/{job_id}` cancels it)."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    with state_conflicts():
        return await plane.delete(job_id, caller)


# no-transform: a proxy that compresses or rewrites answers would hold events back.
EVENT_STREAM_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}


@router.get(
    "/v1/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: {"content": {"text/event-stream": {}}},
        204: {"description": "Last-Event-ID was `end`: the client has seen the last event"},
    },
    summary="Follow a job (server-sent events)",
    description=EVENTS_DESCRIPTION,
)
async def job_events(
    job_id: str,
    request: Request,
    authorization: Authorization = None,
    last_event_id: str | None = Header(None, description="Resume after this event id"),
) -> Response:
    """The job's events as server-sent events; 204 after the last one (`Last-Event-ID: end`),
    the one answer that stops an EventSource from reconnecting."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    try:
        resume = parse_event_id(last_event_id) if last_event_id else None
    except ValueError as exc:
        raise InvalidArgument(f"Last-Event-ID: {exc}") from None
    if resume is not None and resume.final:
        await plane.job(job_id, caller)  # still a 404 for a job that is not the caller's
        return Response(status_code=204)
    events = plane.events(job_id, caller)
    # The first event before answering, so that a job that is not the caller's is a 404, not
    # a stream that ends at once.
    first = await anext(events, None)
    frames = _frames(first, events, EventIds(resume), base_url_of(request))
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers=dict(EVENT_STREAM_HEADERS),
    )


@router.head(
    "/v1/jobs/{job_id}/events",
    responses=ERRORS,
    summary="Whether a job can be followed: the headers its event stream starts with",
)
async def job_events_head(
    job_id: str, request: Request, authorization: Authorization = None
) -> Response:
    """200 with the event stream's headers for the caller's job, 404 otherwise; no stream is
    opened (HTTP answers HEAD wherever it answers GET, RFC 9110 9.3.2)."""
    plane = context_of(request).plane
    await plane.job(job_id, plane.reader(authorization))
    return Response(
        status_code=200, media_type="text/event-stream", headers=dict(EVENT_STREAM_HEADERS)
    )


async def _frames(
    first: JsonObject | None, rest: AsyncIterator[JsonObject], ids: EventIds, base_url: str
) -> AsyncIterator[bytes]:
    yield f"retry: {SSE_RETRY_MS}\n\n".encode()
    event = first
    try:
        while event is not None:
            event_id = ids.assign(event)
            if event_id is not None:
                if event["kind"] == "result":
                    linked = with_links({"job_id": event["job_id"], "result": event}, base_url)
                    event = linked["result"]
                yield _frame(event["kind"], event, event_id)
            following = asyncio.ensure_future(anext(rest, None))
            try:
                while not (await asyncio.wait({following}, timeout=KEEPALIVE_S))[0]:
                    # A comment line: proxies and browsers keep an idle stream open.
                    yield b": keepalive\n\n"
            finally:
                following.cancel()  # the client left: stop following the job upstream
            event = following.result()
    except MeshError as exc:
        yield _frame("stream-error", {"code": str(exc.code), "message": exc.message})


def _frame(name: str, data: JsonObject, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


RESULT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {"content": {"application/octet-stream": {}}, "description": "The bytes"},
    206: {"description": "One byte range (Range: bytes=...)"},
    416: {"description": "The range lies outside the result"},
}


@router.get(
    "/v1/jobs/{job_id}/result",
    response_class=Response,
    responses=RESULT_RESPONSES,
    summary="A job's result bytes",
)
@router.head(
    "/v1/jobs/{job_id}/result",
    response_class=Response,
    responses=RESULT_RESPONSES,
    summary="A job's result: the headers a GET answers with, without the bytes",
)
async def job_result(
    job_id: str,
    request: Request,
    authorization: Authorization = None,
    range: str | None = Header(None, description="One byte range, e.g. `bytes=0-1023`"),
    if_none_match: str | None = Header(None, description="ETags of a cached copy (304)"),
    if_range: str | None = Header(None, description="The ETag a Range is for; else all (200)"),
    tenant: str | None = Query(None, description="Signed link: the tenant it opens as"),
    expires: str | None = Query(None, description="Signed link: its Unix expiry"),
    signature: str | None = Query(None, description="Signed link: its HMAC"),
) -> Response:
    """The result with its content type; `Range` asks for one byte range (206),
    `If-None-Match` with its ETag answers 304 without it. A signed link (an OpenAI `url`
    result: `tenant`, `expires`, `signature`) opens it without a key."""
    context = context_of(request)
    plane = context.plane
    if tenant is None and expires is None and signature is None:
        caller = plane.reader(authorization)
    else:
        if context.result_links is None:
            raise InvalidArgument("signature: this gateway has no API keys; open it unsigned")
        if tenant is None or expires is None or signature is None:
            link = (("tenant", tenant), ("expires", expires), ("signature", signature))
            missing = next(name for name, value in link if value is None)
            raise InvalidArgument(f"{missing}: a signed link needs tenant, expires and signature")
        context.result_links.check(job_id, tenant, expires, signature)
        caller = plane.link_reader(tenant)
    head = request.method == "HEAD"
    return await result_response(plane, job_id, caller, range, head, if_none_match, if_range)


@router.get("/v1/models", response_model=ModelList, responses=ERRORS, summary="Models")
async def list_models(request: Request, authorization: Authorization = None) -> JsonObject:
    """Every model with its limits and readiness, in OpenAI's list shape (`data[].id`) with
    the mesh's ModelInfo fields beside it."""
    plane = context_of(request).plane
    plane.reader(authorization)
    return {"object": "list", "data": [_model_object(m, plane) for m in await plane.models()]}


@router.get(
    "/v1/models/{model}",
    response_model=dict[str, Any],
    responses=ERRORS,
    summary="A model (OpenAI-compatible)",
)
async def get_model(
    model: str, request: Request, authorization: Authorization = None
) -> JsonObject:
    """One model as `/v1/models` lists it (OpenAI's `models.retrieve`); 404 in OpenAI's
    error shape for a model the mesh does not serve."""
    plane = context_of(request).plane
    plane.reader(authorization)
    models = await plane.models()
    found = next((m for m in models if m["name"] == model), None)
    if found is None:
        known = ", ".join(m["name"] for m in models)
        raise NotFound(f"model: {model[:64]!r} is not served; known: {known}")
    return _model_object(found, plane)


def _model_object(model: JsonObject, plane: JsonPlane) -> JsonObject:
    """A ModelInfo as OpenAI's Model object, with every ModelInfo field beside its own, and
    in `limits` two more of the registry's that requests are held to: `frame_multiple`
    (num_frames - 1 is a multiple of it) and `max_input_pixels` (of an input image)."""
    limits = dict(model.get("limits") or {})
    try:
        spec = plane.spec(model["name"])
    except MeshError:
        spec = None  # a model of the scheduler's that this gateway's registry lacks
    if spec is not None:
        limits["frame_multiple"] = spec.limits.frame_multiple
        limits["max_input_pixels"] = spec.limits.max_input_pixels
    head = {"id": model["name"], "object": "model", "created": 0, "owned_by": "mediamesh"}
    return {**head, **model, "limits": limits}
