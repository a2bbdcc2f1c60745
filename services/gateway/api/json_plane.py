"""The DataPlane in plain data, for the HTTP face: JSON-ready dicts in and out, no protobuf.

This is the only place the HTTP face's values meet protobuf: requests are parsed here (the
proto3 JSON mapping, so bytes fields take base64 and every field keeps its proto name), and
jobs, events and models come back as dicts whose shapes the OpenAPI document of
`mediamesh.gateway.http` describes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.errors import InvalidArgument, Unavailable
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.params import find_model
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway import metrics
from mediamesh.gateway.api.dataplane import DataPlane
from mediamesh.gateway.api.job_link import FINAL_EVENTS
from mediamesh.gateway.api.json_checks import check_json_message
from mediamesh.gateway.api.oip_plane import InferencePlane
from mediamesh.gateway.api.upstream import replayed, with_trace
from mediamesh.gateway.core.recent_models import RecentModels
from mediamesh.gateway.core.strict_json import parse_json
from mediamesh.gateway.core.tenancy import Caller, Tenancy

JsonObject = dict[str, Any]
_REQUEST = common_pb2.GenerateRequest.DESCRIPTOR
# Form values of these field types are text as they stand; any other is read as JSON.
_TEXT_TYPES = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM)
_UNKNOWN_FIELD = re.compile(
    r'type "(?:\w+\.)*(\w+)" has no field named "([^"]{1,64})" at "GenerateRequest\.?([^"]*)"'
)
_BAD_VALUE = re.compile(r"Failed to parse (\w+) field: (.*)")
# Where the parser says a value sat, at the end of its message.
_AT_FIELD = re.compile(r"^(.*) at GenerateRequest\.([\w.\[\]]+)\.*$")


@dataclass(frozen=True)
class Chunk:
    """A piece of a job's artifact: `data` starts at byte `offset` of `total_size`."""

    data: bytes
    offset: int
    total_size: int
    mime_type: str
    sha256: str


def request_from_json(body: object) -> common_pb2.GenerateRequest:
    """A GenerateRequest from a JSON object of its fields (bytes as base64); InvalidArgument
    naming the field at fault otherwise."""
    if not isinstance(body, dict):
        raise InvalidArgument("request: expected a JSON object of GenerateRequest fields")
    check_json_message(body, _REQUEST)
    request = common_pb2.GenerateRequest()
    try:
        json_format.ParseDict(body, request)
    except json_format.ParseError as exc:
        raise InvalidArgument(_parse_error(str(exc))) from None
    check_bounds(request)
    return request


def _parse_error(text: str) -> str:
    """The JSON parser's complaint as the mesh words errors: `field.path: what is wrong`.

    `check_json_message` answers for every value it knows to be wrong first; this words
    whatever the parser still refuses."""
    first = text.split("\n")[0]  # the rest lists every field name
    unknown = _UNKNOWN_FIELD.search(first)
    if unknown:
        message, name, owner = unknown.groups()
        path = f"{owner}.{name}" if owner else name
        return f"{path}: {message} has no such field"
    names = []
    while bad := _BAD_VALUE.match(first):
        names.append(bad[1])
        first = bad[2]
    first = first.rstrip(".")
    at = _AT_FIELD.match(first)
    if at:
        return f"{at[2]}: {at[1]}"
    return f"{'.'.join(names) or 'request'}: {first}"


def request_from_form(
    fields: Mapping[str, str], files: Mapping[str, bytes]
) -> common_pb2.GenerateRequest:
    """A GenerateRequest from multipart form fields (text) and file parts (bytes fields).

    A line break in a text field is a newline, LF: HTML forms send each as CRLF, which would
    change the text stored and count twice against its length limit."""
    body: JsonObject = {}
    for name, text in fields.items():
        field = _field(name)
        if field.type in _TEXT_TYPES and not field.is_repeated:
            body[name] = text.replace("\r\n", "\n")
            continue
        if field.type == FieldDescriptor.TYPE_BYTES:
            raise InvalidArgument(
                f"{name}: a form sends this field as a file part (multipart file, as "
                f'curl -F "{name}=@file"), not as a text value'
            )
        body[name] = parse_json(
            text,
            name,
            keys_under=f"{name}.",
            not_json=f"{name}: {text[:64]!r} is not {_form_shape(field)}; a form sends this "
            "field as JSON",
        )
    for name in files:
        if _field(name).type != FieldDescriptor.TYPE_BYTES:
            raise InvalidArgument(f"{name}: not a file field; send it as a form value")
    request = request_from_json(body)
    for name, data in files.items():
        setattr(request, name, data)
    check_bounds(request)
    return request


def _form_shape(field: FieldDescriptor) -> str:
    """What a form value of `field` must be, in words: `adapters` is a JSON array of objects
    with keys name, scale."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        keys = ", ".join(f.name for f in field.message_type.fields)
        shape = (
            f"objects with keys {keys}" if field.is_repeated else f"a JSON object with keys {keys}"
        )
        return f"a JSON array of {shape}" if field.is_repeated else shape
    if field.is_repeated:
        return "a JSON array"
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true or false"
    return "a number"


_SCALAR_SCHEMAS: dict[int, JsonObject] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
}


def generate_request_schema() -> JsonObject:
    """The JSON schema of a GenerateRequest in the proto3 JSON mapping, for OpenAPI."""
    return _message_schema(_REQUEST)


def _message_schema(descriptor: Any) -> JsonObject:
    properties = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            schema = _message_schema(field.message_type)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            schema = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
        else:
            schema = _SCALAR_SCHEMAS.get(field.type, {"type": "integer", "minimum": 0})
        properties[field.name] = {"type": "array", "items": schema} if field.is_repeated else schema
    return {"type": "object", "title": descriptor.name, "properties": properties}


def _field(name: str) -> FieldDescriptor:
    field = _REQUEST.fields_by_name.get(name)
    if field is None:
        raise InvalidArgument(f"{name}: GenerateRequest has no such field")
    return field


@dataclass(frozen=True)
class JobListing:
    """A job listing's filters and page as query parameters give them."""

    # Job state names (any case); empty: every state.
    states: list[str]
    models: list[str]
    limit: int
    # The last job id of the previous page.
    after: str | None
    oldest_first: bool


def _job_state(name: str) -> str:
    """A job state's enum name; InvalidArgument naming the `state` parameter otherwise."""
    known = [v.name for v in common_pb2.JobState.DESCRIPTOR.values if v.number]
    if name.upper() not in known:
        raise InvalidArgument(
            f"state: {name[:32]!r} is not a job state; use one of {', '.join(known)}"
        )
    return name.upper()


class JsonPlane:
    """The DataPlane's operations with JSON-ready answers."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        # The Open Inference Protocol's REST face reaches the mesh through this.
        self.inference = InferencePlane(plane.up)
        self._recent_models = RecentModels(self.models)

    def spec(self, model: str) -> ModelSpec:
        """The registry entry the gateway checks `model`'s requests against, for a rule its
        ModelInfo does not carry (a video model's frame multiple); NotFound for none."""
        return find_model(self.plane.up.registry, model)

    def queue_of(self, model: object) -> str:
        """The queue label a refusal of a job for `model` (as a body sent it, perhaps not
        text) is counted under: its modality, or `unknown` for no model in the registry."""
        return metrics.queue_of(self.plane.up.registry, model)

    @property
    def tenancy(self) -> Tenancy:
        """The gateway's API keys and quotas, for a route that admits several jobs at once
        or needs to know whether keys are required."""
        return self.plane.up.tenancy

    def caller(self, authorization: str | None, traceparent: str | None = None) -> Caller:
        """The caller an `Authorization: Bearer <key>` header names, carrying the request's
        `traceparent` header to forward with the jobs it submits."""
        caller = self.plane.caller(authorization)
        return with_trace(caller, {"traceparent": traceparent}) if traceparent else caller

    def reader(self, authorization: str | None) -> Caller:
        """The caller of a read, charged to its tenant's read budget."""
        return self.plane.reader(authorization)

    def link_reader(self, tenant: str) -> Caller:
        """The caller a checked, signed result link stands for, charged like any read."""
        caller = self.tenancy.caller_of(tenant)
        self.tenancy.check_read(caller)
        return caller

    async def submit(self, request: common_pb2.GenerateRequest, caller: Caller) -> JsonObject:
        """Submits a parsed request; answers with the job as `job` shows it, plus
        `deduplicated` (an earlier job with the same idempotency key)."""
        handle = await self.plane.submit(request, caller)
        if handle.HasField("job"):
            info = handle.job
        else:  # a scheduler from before JobHandle.job, during a rolling upgrade
            info = await self.plane.job(handle.job_id, caller)
        return {**job_view(info), "deduplicated": handle.deduplicated}

    async def job(self, job_id: str, caller: Caller) -> JsonObject:
        """One of the caller's jobs."""
        return job_view(await self.plane.job(job_id, caller))

    def model_names(self, modality: str) -> list[str]:
        """The registry's models of one modality."""
        return [spec.name for spec in self.plane.up.registry.models if spec.modality == modality]

    async def jobs(self, query: JobListing, caller: Caller) -> tuple[list[JsonObject], bool]:
        """A page of the caller's jobs as `job` shows each, and whether more follow."""
        request = gateway_pb2.ListJobsRequest(
            states=[_job_state(name) for name in query.states],
            models=query.models,
            page_size=query.limit,
            after_job_id=query.after or "",
            oldest_first=query.oldest_first,
        )
        check_bounds(request)
        page = await self.plane.jobs(request, caller)
        return [job_view(info) for info in page.jobs], page.has_more

    async def cancel(self, job_id: str, caller: Caller) -> JsonObject:
        """Cancels one of the caller's jobs; the job afterwards."""
        return job_view(await self.plane.cancel(job_id, caller))

    async def delete(self, job_id: str, caller: Caller) -> JsonObject:
        """Deletes one of the caller's ended jobs with its result; what was deleted."""
        deleted = await self.plane.delete(job_id, caller)
        return {
            "job_id": deleted.job_id,
            "state": common_pb2.JobState.Name(deleted.state),
            "result_bytes": deleted.result_bytes,
            "deleted": True,
        }

    async def recent_models(self) -> list[JsonObject]:
        """`models()` as fetched within the last second, for a submission to pick its model
        from (`RecentModels`); the entries are shared, not to be changed."""
        return await self._recent_models.get()

    async def models(self) -> list[JsonObject]:
        """Every model the mesh serves, with its limits and readiness."""
        response = await self.plane.models()
        return [
            json_format.MessageToDict(
                model, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            for model in response.models
        ]

    async def events(self, job_id: str, caller: Caller) -> AsyncIterator[JsonObject]:
        """The job's events as `event_view` shows them, from its current state to its end."""
        async for event in self.plane.watch(job_id, caller):
            yield event_view(event)

    async def outcome(self, job_id: str, caller: Caller) -> tuple[JsonObject, bytes | None]:
        """The job's final event as `event_view` shows it, once the job has ended, and its
        result's bytes when they came inline (None: too large, or a URL was asked for; fetch
        them with `download`). The scheduler sends no progress for this wait."""
        final: common_pb2.GenerateEvent | None = None
        async for event in self.plane.watch(job_id, caller, final_only=True):
            final = event
        if final is None:
            raise Unavailable(f"job {job_id}: its event stream ended without its end")
        return _outcome_view(final)

    async def follow(self, request: common_pb2.GenerateRequest, caller: Caller) -> Followed:
        """Submits a parsed request and follows its job over one exchange with the scheduler,
        where `submit` and `outcome` take a call each; answers once the job is named.
        Closing the answer before its outcome is read cancels the job (on the link)."""
        events = self.plane.follow(request, caller)
        try:
            opening = await anext(events)
        except BaseException:
            await events.aclose()
            raise
        return Followed(opening.job_id, replayed(opening, events))

    async def followed_outcome(
        self, followed: Followed, caller: Caller
    ) -> tuple[JsonObject, bytes | None]:
        """`outcome` of a followed job, from its own exchange; watched again should that
        exchange end without the job's end."""
        final: common_pb2.GenerateEvent | None = None
        try:
            async for event in followed.events:
                if event.WhichOneof("event") in FINAL_EVENTS:
                    final = event
        finally:
            await followed.close()
        if final is None:
            return await self.outcome(followed.job_id, caller)
        return _outcome_view(final)

    async def download(
        self, job_id: str, caller: Caller, offset: int = 0
    ) -> AsyncGenerator[Chunk, None]:
        """The job's artifact in chunks from byte `offset`."""
        async for chunk in self.plane.download(job_id, caller, offset):
            yield Chunk(chunk.data, chunk.offset, chunk.total_size, chunk.mime_type, chunk.sha256)


@dataclass
class Followed:
    """A job submitted and followed over one exchange (`JsonPlane.follow`)."""

    job_id: str
    # Its events from the first (as queued) on, to its final one.
    events: AsyncGenerator[common_pb2.GenerateEvent, None]

    async def close(self) -> None:
        """Stop following; before the job's end, that cancels it (on the link)."""
        if getattr(self.events, "ag_running", False):
            # A reader being cancelled is inside it still; it closes it as it ends.
            return
        await self.events.aclose()


def _outcome_view(final: common_pb2.GenerateEvent) -> tuple[JsonObject, bytes | None]:
    inline = final.result.data if final.HasField("result") and final.result.data else None
    return event_view(final), inline


def list_page(items: list[JsonObject], has_more: bool, id_field: str) -> JsonObject:
    """A page of items in OpenAI's list shape, with the ids a next page starts after."""
    return {
        "object": "list",
        "data": items,
        "has_more": has_more,
        "first_id": items[0][id_field] if items else None,
        "last_id": items[-1][id_field] if items else None,
    }


def job_view(info: common_pb2.JobInfo) -> JsonObject:
    """A JobInfo as JSON: enum names, plain integers, null where a part is absent."""
    return {
        "job_id": info.job_id,
        "model": info.model,
        "state": common_pb2.JobState.Name(info.state),
        "priority": common_pb2.Priority.Name(info.priority),
        "tenant": info.tenant,
        "created_unix_ms": info.created_unix_ms,
        "finished_unix_ms": info.finished_unix_ms or None,
        "expires_unix_ms": info.expires_unix_ms or None,
        "attempts": info.attempts,
        "step": info.step,
        "total_steps": info.total_steps,
        # uint64 as a decimal string, as proto3 JSON writes it: JavaScript rounds past 2^53.
        "seed": str(info.seed),
        "worker_id": info.worker_id,
        "batch_id": info.batch_id,
        "prompt": info.prompt,
        "steps": info.steps,
        "width": info.width,
        "height": info.height,
        "num_frames": info.num_frames,
        "fps": info.fps,
        "paused": info.paused,
        "result": _result_view(info.result) if info.HasField("result") else None,
        "error": _error_view(info.error) if info.HasField("error") else None,
    }


def event_view(event: common_pb2.GenerateEvent) -> JsonObject:
    """A GenerateEvent as JSON: `kind` names its part (queued, progress, notice, result,
    error), whose fields sit beside `job_id` and `state`."""
    kind = event.WhichOneof("event") or "notice"
    view: JsonObject = {
        "kind": kind,
        "job_id": event.job_id,
        "state": common_pb2.JobState.Name(event.state),
    }
    if kind == "queued":
        q = event.queued
        eta_s = q.eta_s if q.HasField("eta_s") else None  # null: no worker serves it yet
        view.update(position=q.position, eta_s=eta_s, queue=q.queue)
    elif kind == "progress":
        p = event.progress
        preview = None
        if p.HasField("preview") and p.preview.data:
            preview = {
                "data": json_format.MessageToDict(p.preview)["data"],
                "mime_type": p.preview.mime_type,
            }
        view.update(step=p.step, total_steps=p.total_steps, attempt=p.attempt, preview=preview)
    elif kind == "notice":
        n = event.notice
        view.update(notice=n.kind, message=n.message, worker_id=n.worker_id, attempt=n.attempt)
    elif kind == "result":
        view.update(_result_view(event.result))
    else:
        view.update(_error_view(event.error))
    return view


def _result_view(result: common_pb2.Result) -> JsonObject:
    size = len(result.data) or result.artifact.size_bytes
    # An inline result carries its bytes and no reference; the digest is the same either way.
    digest = result.artifact.sha256 or (hashlib.sha256(result.data).hexdigest() if size else "")
    return {
        "mime_type": result.mime_type,
        "seed": str(result.seed),
        "size_bytes": size,
        "sha256": digest,
        # A presigned URL when the mesh stores results in object storage; the HTTP face fills
        # in its own result endpoint otherwise.
        "url": result.url or None,
        "url_expires_unix_ms": result.url_expires_unix_ms or None,
    }


def _error_view(error: common_pb2.Error) -> JsonObject:
    return {"code": error.code, "message": error.message}
