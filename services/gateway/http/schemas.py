"""The JSON shapes of the HTTP face, for its OpenAPI document (answers are built as plain
dicts by `mediamesh.gateway.api.json_plane`; these models describe them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from mediamesh.common.errors import StatusCode


class ErrorBody(BaseModel):
    """Every error: a transport-neutral status code name and a message naming the field."""

    code: str = Field(examples=[StatusCode.INVALID_ARGUMENT.value])
    message: str = Field(examples=["steps: 500 is out of range; allowed 1..50"])


class ResultView(BaseModel):
    """A finished job's artifact."""

    mime_type: str
    # uint64 as a decimal string (proto3 JSON), exact in every JSON parser.
    seed: str
    size_bytes: int
    sha256: str
    # Where to GET the bytes: a presigned object-storage URL, or this gateway's
    # /v1/jobs/{id}/result.
    url: str | None
    url_expires_unix_ms: int | None


class JobError(BaseModel):
    """Why a job failed."""

    code: str
    message: str


class JobLinks(BaseModel):
    """Paths of the job's other resources on this gateway."""

    self: str
    events: str
    result: str


class JobView(BaseModel):
    """A job: its state, progress, and its result or error once it ended."""

    job_id: str
    model: str
    state: str = Field(description="QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, ...")
    priority: str
    tenant: str
    created_unix_ms: int
    finished_unix_ms: int | None
    expires_unix_ms: int | None = Field(
        None,
        description="When the scheduler forgets the ended job and deletes its result: its end "
        "plus the scheduler's retention_s. Null while it is unfinished.",
    )
    attempts: int
    step: int
    total_steps: int
    # uint64 as a decimal string (proto3 JSON), exact in every JSON parser.
    seed: str
    worker_id: str
    batch_id: str = Field(
        "", description="Batch it runs or ran in last; jobs of one pipeline call share it."
    )
    # What the job was accepted with, every default applied; 0 where a field does not apply
    # to the model's modality.
    prompt: str
    steps: int = Field(description="Steps asked for; total_steps is what the run takes.")
    width: int
    height: int
    num_frames: int
    fps: int
    paused: bool = Field(
        False,
        description="Its batch is paused at a step boundary on its worker while more urgent "
        "work runs; it resumes there. state stays RUNNING meanwhile.",
    )
    result: ResultView | None
    error: JobError | None
    links: JobLinks
    deduplicated: bool | None = Field(
        None, description="On submit: an earlier job with the same idempotency_key."
    )


class DeletedJobView(BaseModel):
    """An ended job deleted before its retention: its result and its record are gone, and
    its id is unknown from now on."""

    job_id: str
    state: str = Field(description="The state it had ended in: SUCCEEDED, FAILED, CANCELLED, ...")
    result_bytes: int = Field(description="Bytes of result deleted; 0 for a job without one.")
    deleted: bool = True


class JobList(BaseModel):
    """A page of jobs, in OpenAI's list shape: continue with `after` set to `last_id` while
    `has_more` is true."""

    object: str = "list"
    data: list[JobView]
    has_more: bool
    first_id: str | None
    last_id: str | None


class ModelList(BaseModel):
    """The models, in OpenAI's list shape; each entry also has every ModelInfo field (name,
    modality, limits, ready, inputs, previews, output_formats, ...)."""

    object: str = "list"
    data: list[dict[str, Any]]


class Health(BaseModel):
    """Liveness or readiness."""

    status: str


EVENTS_DESCRIPTION = """\
A `text/event-stream` of the job's events, from its current state to its end (the same
events as gRPC Watch). Each frame has an `id:`, an `event:` name and one JSON `data:` line
with `kind`, `job_id`, `state` and the fields of its kind:

- `queued`: `position`, `eta_s` (seconds to finish; null while no worker serves the model),
  `queue`
- `progress`: `step`, `total_steps`, `attempt`, `preview` (null, or `{data: base64,
  mime_type}`)
- `notice`: `notice` (dispatched, preempted, retry, ...), `message`, `worker_id`, `attempt`
- `result`: `mime_type`, `seed`, `size_bytes`, `sha256`, `url` (GET it for the bytes)
- `error`: `code`, `message`

The stream ends after `result` or `error` (id `end`). Ids are positions in the job's life
(`attempt.step.rank`), the same on every gateway replica: reconnect with `Last-Event-ID`
and the stream resumes after that event without repeating it; after `end` nothing follows,
and the answer is 204 No Content, which stops an EventSource from reconnecting. A
connection lost to the scheduler ends the stream with a `stream-error` event (`code`,
`message`; no id: reconnect to resume).
"""
