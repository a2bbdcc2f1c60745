"""Protobuf <-> scheduler types. The only scheduler module that builds messages."""

from __future__ import annotations

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.registry import MODEL_FIELDS, ModelSpec
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.events import WatchEvent
from mediamesh.scheduler.store.artifacts import StoredArtifact


def state(value: JobState) -> str:
    """The wire name of a job state: JobState's values are the proto enum's names, and message
    constructors take an enum by name (rejecting one the proto lacks)."""
    return value.value


def result_message(
    artifact: StoredArtifact | None, inline_limit: int, data: bytes | None
) -> common_pb2.Result:
    """A job's Result: the bytes inline when `data` is given and fits `inline_limit`, else an
    artifact reference to Download. Empty when there is no artifact."""
    if artifact is None:
        return common_pb2.Result()
    ref = common_pb2.ArtifactRef(size_bytes=artifact.size_bytes, sha256=artifact.sha256)
    if data is not None and artifact.size_bytes <= inline_limit:
        return common_pb2.Result(data=data, mime_type=artifact.mime_type, seed=artifact.seed)
    return common_pb2.Result(mime_type=artifact.mime_type, seed=artifact.seed, artifact=ref)


def generate_event(
    event: WatchEvent, data: bytes | None, inline_limit: int
) -> common_pb2.GenerateEvent:
    """The GenerateEvent for a watch event; `data` is the artifact's bytes if read to inline."""
    message = common_pb2.GenerateEvent(job_id=event.job_id, state=state(event.state))
    if event.kind == "queued":
        message.queued.CopyFrom(
            common_pb2.Queued(position=event.position, eta_s=event.eta_s, queue=event.queue)
        )
    elif event.kind == "progress":
        message.progress.CopyFrom(
            common_pb2.Progress(
                step=event.step, total_steps=event.total_steps, attempt=event.attempt
            )
        )
    elif event.kind == "result":
        message.result.CopyFrom(result_message(event.artifact, inline_limit, data))
    elif event.kind == "error":
        message.error.CopyFrom(common_pb2.Error(code=event.code, message=event.message))
    else:
        message.notice.CopyFrom(
            common_pb2.Notice(
                kind=event.notice,
                message=event.message,
                worker_id=event.worker_id,
                attempt=event.attempt,
            )
        )
    return message


def job_info(job: Job, artifact: StoredArtifact | None) -> common_pb2.JobInfo:
    """The JobInfo of `job`; a succeeded job's result is always a reference, never inline bytes."""
    info = common_pb2.JobInfo(
        job_id=job.job_id,
        model=job.model,
        state=state(job.state),
        priority=job.priority.name,
        tenant=job.tenant,
        created_unix_ms=int(job.created_at * 1000),
        finished_unix_ms=int((job.finished_at or 0) * 1000),
        attempts=job.attempts,
        step=job.step,
        total_steps=job.total_steps or job.params.steps,
        seed=job.params.seed,
        worker_id=job.worker_id or job.last_worker_id,
    )
    if artifact is not None and job.state is JobState.SUCCEEDED:
        info.result.CopyFrom(result_message(artifact, 0, None))
    if job.error_code:
        info.error.CopyFrom(common_pb2.Error(code=job.error_code, message=job.error_message))
    return info


def model_info(spec: ModelSpec, devices: list[str]) -> common_pb2.ModelInfo:
    """The ModelInfo of `spec`, ready when any `devices` (worker/device labels) serve it."""
    d, lim = spec.defaults, spec.limits
    return common_pb2.ModelInfo(
        name=spec.name,
        modality=spec.modality,
        pipeline=spec.pipeline,
        parallelism=spec.parallelism.mode,
        ready=bool(devices),
        mime_type=spec.output.mime_type,
        devices=devices,
        accepted_fields=[f for f in MODEL_FIELDS if f in spec.accepted_fields],
        output_formats=list(spec.output_formats),
        limits=common_pb2.ModelLimits(
            default_steps=d.steps,
            max_steps=lim.max_steps,
            default_width=d.width,
            default_height=d.height,
            max_width=lim.max_width,
            max_height=lim.max_height,
            size_multiple=lim.size_multiple,
            default_num_frames=d.num_frames,
            max_num_frames=lim.max_num_frames,
            default_duration_s=d.duration_s,
            max_duration_s=lim.max_duration_s,
            default_guidance_scale=d.guidance_scale,
            max_guidance_scale=lim.max_guidance_scale,
            max_batch=spec.batching.max_batch,
        ),
    )


def list_models(
    specs: list[ModelSpec], devices: dict[str, list[str]]
) -> gateway_pb2.ListModelsResponse:
    """The ListModelsResponse for `specs`; `devices` maps a model name to its serving devices."""
    return gateway_pb2.ListModelsResponse(
        models=[model_info(s, devices.get(s.name, [])) for s in specs]
    )


def priority_of(value: str) -> Priority:
    """The Priority named `value`; KeyError for an unknown name."""
    return Priority[value]
