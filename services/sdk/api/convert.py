"""Protobuf messages to the SDK's plain values and back; gRPC errors to GatewayError."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import grpc

from mediamesh.common.api.status import from_grpc
from mediamesh.common.errors import PUSHBACK_KEY, RETRY_AFTER_KEY, StatusCode
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Error, Event, Notice, Progress, Queued, Result
from mediamesh.sdk.options import GenerateParams, webhook_fields
from mediamesh.sdk.types import (
    AdapterInfo,
    Chunk,
    DeletedJob,
    JobHandle,
    JobInfo,
    JobPage,
    JobQuery,
    JobState,
    ModelInfo,
    ModelLimits,
    Priority,
    UploadHandle,
)
from mediamesh.sdk.uploads import UploadSource


def generate_request(params: GenerateParams) -> common_pb2.GenerateRequest:
    """The request message; fields the caller left unset stay unset."""
    values: dict[str, Any] = dict(params.options)
    adapters = values.pop("adapters", ())
    values["adapters"] = [
        common_pb2.AdapterRef(name=name)
        if scale is None
        else common_pb2.AdapterRef(name=name, scale=scale)
        for name, scale in adapters
    ]
    webhook = values.pop("webhook", None)
    if webhook is not None:
        values["webhook"] = webhook_message(webhook)
    priority = values.pop("priority", None)
    if priority is not None:
        # Message constructors take an enum by name, and reject a name the proto lacks.
        values["priority"] = str(priority)
    return common_pb2.GenerateRequest(model=params.model, prompt=params.prompt, **values)


def webhook_message(webhook: object) -> common_pb2.Webhook:
    """The `webhook` option, {"url": ..., "events": [...]}, as its message; a key the message
    has no field for raises ValueError, a value of the wrong type TypeError, each naming it
    (options.webhook_fields)."""
    url, events = webhook_fields(webhook)
    return common_pb2.Webhook(url=url, events=list(events))


def state(value: int) -> JobState:
    """A JobState from its wire number."""
    return JobState(common_pb2.JobState.Name(value))


def event(message: common_pb2.GenerateEvent) -> Event | None:
    """The typed event, or None for one that carries nothing this SDK knows."""
    job_id, job_state = message.job_id, state(message.state)
    kind = message.WhichOneof("event")
    if kind == "queued":
        q = message.queued
        eta_s = q.eta_s if q.HasField("eta_s") else None
        return Queued(
            job_id=job_id, state=job_state, position=q.position, eta_s=eta_s, queue=q.queue
        )
    if kind == "progress":
        p = message.progress
        return Progress(
            job_id=job_id,
            state=job_state,
            step=p.step,
            total_steps=p.total_steps,
            attempt=p.attempt,
            preview=p.preview.data,
            preview_mime_type=p.preview.mime_type,
        )
    if kind == "notice":
        n = message.notice
        return Notice(
            job_id=job_id,
            state=job_state,
            kind=n.kind,
            message=n.message,
            worker_id=n.worker_id,
            attempt=n.attempt,
        )
    if kind == "result":
        r = message.result
        return Result(
            job_id=job_id,
            state=job_state,
            data=r.data,
            mime_type=r.mime_type,
            seed=r.seed,
            size_bytes=r.artifact.size_bytes,
            sha256=r.artifact.sha256,
            url=r.url,
            url_expires_unix_ms=r.url_expires_unix_ms,
        )
    if kind == "error":
        e = message.error
        return Error(job_id=job_id, state=job_state, code=e.code, message=e.message)
    return None


def job_handle(message: gateway_pb2.JobHandle) -> JobHandle:
    """An accepted job."""
    info = job_info(message.job) if message.HasField("job") else None
    return JobHandle(message.job_id, state(message.state), message.deduplicated, info)


def list_jobs_request(query: JobQuery) -> gateway_pb2.ListJobsRequest:
    """The ListJobs request of a query."""
    return gateway_pb2.ListJobsRequest(
        states=[state.value for state in query.states],
        models=query.models,
        page_size=query.page_size,
        after_job_id=query.after,
        oldest_first=query.oldest_first,
    )


def job_page(message: gateway_pb2.ListJobsResponse) -> JobPage:
    """A page of a job listing."""
    return JobPage([job_info(job) for job in message.jobs], message.has_more)


def job_info(message: common_pb2.JobInfo) -> JobInfo:
    """A job's description."""
    priority = None
    if message.priority != common_pb2.PRIORITY_UNSPECIFIED:
        priority = Priority(common_pb2.Priority.Name(message.priority))
    return JobInfo(
        job_id=message.job_id,
        model=message.model,
        state=state(message.state),
        priority=priority,
        tenant=message.tenant,
        created_unix_ms=message.created_unix_ms,
        finished_unix_ms=message.finished_unix_ms,
        attempts=message.attempts,
        step=message.step,
        total_steps=message.total_steps,
        seed=message.seed,
        worker_id=message.worker_id,
        batch_id=message.batch_id,
        prompt=message.prompt,
        steps=message.steps,
        width=message.width,
        height=message.height,
        num_frames=message.num_frames,
        fps=message.fps,
        paused=message.paused,
        expires_unix_ms=message.expires_unix_ms,
        mime_type=message.result.mime_type,
        size_bytes=message.result.artifact.size_bytes,
        sha256=message.result.artifact.sha256,
        error_code=message.error.code,
        error_message=message.error.message,
    )


def deleted_job(message: common_pb2.DeletedJob) -> DeletedJob:
    """A job DeleteJob deleted."""
    return DeletedJob(message.job_id, state(message.state), message.result_bytes)


def model_info(message: common_pb2.ModelInfo) -> ModelInfo:
    """A registry model; the limits are copied field by field, as named in the proto."""
    limits = ModelLimits(**{f.name: getattr(message.limits, f.name) for f in fields(ModelLimits)})
    return ModelInfo(
        name=message.name,
        modality=message.modality,
        pipeline=message.pipeline,
        parallelism=message.parallelism,
        ready=message.ready,
        mime_type=message.mime_type,
        limits=limits,
        devices=tuple(message.devices),
        accepted_fields=tuple(message.accepted_fields),
        output_formats=tuple(message.output_formats),
        preemption=message.preemption,
        previews=message.previews,
        inputs=tuple(message.inputs),
        default_strength=round(message.default_strength, 6),
        warmup=message.warmup,
        adapters=tuple(
            # float32 on the wire: 0.8 arrives as 0.800000011920929.
            AdapterInfo(adapter.name, round(adapter.default_scale, 6))
            for adapter in message.adapters
        ),
    )


def upload_chunks(source: UploadSource) -> Iterator[gateway_pb2.UploadChunk]:
    """The chunks of an upload; the first also carries its SHA-256 and MIME type."""
    for index, data in enumerate(source.chunks()):
        if index == 0:
            yield gateway_pb2.UploadChunk(
                data=data, sha256=source.sha256, mime_type=source.mime_type
            )
        else:
            yield gateway_pb2.UploadChunk(data=data)


def upload_handle(message: gateway_pb2.UploadHandle) -> UploadHandle:
    """A stored upload."""
    return UploadHandle(
        input_id=message.input_id,
        size_bytes=message.size_bytes,
        sha256=message.sha256,
        expires_unix_ms=message.expires_unix_ms,
    )


def chunk(message: gateway_pb2.DownloadChunk) -> Chunk:
    """One piece of an artifact."""
    return Chunk(
        message.data, message.offset, message.total_size, message.mime_type, message.sha256
    )


def gateway_error(exc: grpc.RpcError) -> GatewayError:
    """The status of a failed call, with the wait the server asked for.

    The standard pushback trailer wins; `retry-after-ms` is what the mesh sent before it.
    """
    call: Any = exc
    code = call.code()
    trailing = dict(call.trailing_metadata() or ())
    wait_ms = trailing.get(PUSHBACK_KEY) or trailing.get(RETRY_AFTER_KEY) or "0"
    try:
        retry_after_s = max(int(wait_ms), 0) / 1000
    except ValueError:
        retry_after_s = 0.0
    status = from_grpc(code) if code else StatusCode.UNKNOWN
    return GatewayError(status, call.details() or "", retry_after_s)
