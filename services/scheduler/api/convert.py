"""Protobuf <-> scheduler types. The only scheduler module that builds messages."""

from __future__ import annotations

from typing import Any

from mediamesh.v1 import common_pb2, gateway_pb2, worker_pb2

from services.common.params import RequestFields
from services.common.registry import ModelSpec
from services.scheduler.core.jobs import Job, JobState, Priority
from services.scheduler.events import WatchEvent
from services.scheduler.store.artifacts import StoredArtifact
from services.worker.core.batch import (
    JobCheckpointed,
    JobFailed,
    JobFinished,
    JobNotice,
    JobParams,
    JobPreempted,
    StepDone,
    WorkerEvent,
)

_STATE = {s: common_pb2.JobState.Value(s.value) for s in JobState}


def request_fields(request: common_pb2.GenerateRequest) -> RequestFields:
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
        priority=priority_name(request.priority),
        timeout_ms=opt("timeout_ms"),
    )


def priority_name(value: int) -> str:
    if value == common_pb2.PRIORITY_UNSPECIFIED:
        return "STANDARD"
    try:
        return common_pb2.Priority.Name(value)
    except ValueError:
        return f"#{value}"


def state(value: JobState) -> int:
    return _STATE[value]


def result_message(artifact: StoredArtifact | None, inline_limit: int, data: bytes | None) -> Any:
    if artifact is None:
        return common_pb2.Result()
    ref = common_pb2.ArtifactRef(size_bytes=artifact.size_bytes, sha256=artifact.sha256)
    if data is not None and artifact.size_bytes <= inline_limit:
        return common_pb2.Result(data=data, mime_type=artifact.mime_type, seed=artifact.seed)
    return common_pb2.Result(mime_type=artifact.mime_type, seed=artifact.seed, artifact=ref)


def generate_event(event: WatchEvent, data: bytes | None, inline_limit: int) -> Any:
    message = common_pb2.GenerateEvent(job_id=event.job_id, state=state(event.state))
    if event.kind == "queued":
        message.queued.CopyFrom(
            common_pb2.Queued(position=event.position, eta_s=event.eta_s, queue=event.queue)
        )
    elif event.kind == "progress":
        message.progress.CopyFrom(
            common_pb2.Progress(step=event.step, total_steps=event.total_steps)
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


def job_info(job: Job, artifact: StoredArtifact | None) -> Any:
    info = common_pb2.JobInfo(
        job_id=job.job_id,
        model=job.model,
        state=state(job.state),
        priority=common_pb2.Priority.Value(job.priority.name),
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


def model_info(spec: ModelSpec, devices: list[str]) -> Any:
    d, lim = spec.defaults, spec.limits
    return common_pb2.ModelInfo(
        name=spec.name,
        modality=spec.modality,
        pipeline=spec.pipeline,
        parallelism=spec.parallelism.mode,
        ready=bool(devices),
        mime_type=spec.output.mime_type,
        devices=devices,
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


def list_models(specs: list[ModelSpec], devices: dict[str, list[str]]) -> Any:
    return gateway_pb2.ListModelsResponse(
        models=[model_info(s, devices.get(s.name, [])) for s in specs]
    )


def job_spec(params: JobParams, deadline_ms: int) -> Any:
    return worker_pb2.JobSpec(
        job_id=params.job_id,
        prompt=params.prompt,
        negative_prompt=params.negative_prompt,
        steps=params.steps,
        seed=params.seed,
        width=params.width,
        height=params.height,
        num_frames=params.num_frames,
        guidance_scale=params.guidance_scale,
        duration_s=params.duration_s,
        deadline_unix_ms=deadline_ms,
        resume_checkpoint=params.resume_checkpoint or "",
        checkpoint_every_steps=params.checkpoint_every_steps,
    )


def job_params(s: worker_pb2.JobSpec) -> JobParams:
    return JobParams(
        job_id=s.job_id,
        prompt=s.prompt,
        negative_prompt=s.negative_prompt,
        steps=s.steps,
        seed=s.seed,
        width=s.width,
        height=s.height,
        num_frames=s.num_frames,
        guidance_scale=s.guidance_scale,
        duration_s=s.duration_s,
        resume_checkpoint=s.resume_checkpoint or None,
        checkpoint_every_steps=s.checkpoint_every_steps,
    )


def worker_event(m: worker_pb2.BatchEvent) -> WorkerEvent | None:
    kind = m.WhichOneof("event")
    job_id = m.job_id
    if kind == "progress":
        p = m.progress
        return StepDone(job_id, p.step, p.total_steps, m.step_seconds)
    if kind == "output":
        o = m.output
        return JobFinished(job_id, o.data, o.mime_type, o.seed)
    if kind == "error":
        return JobFailed(job_id, m.error.code, m.error.message)
    if kind == "preempted":
        p = m.preempted
        return JobPreempted(job_id, p.checkpoint, p.step)
    if kind == "checkpointed":
        c = m.checkpointed
        return JobCheckpointed(job_id, c.checkpoint, c.step)
    if kind == "notice":
        return JobNotice(job_id, m.notice.kind, m.notice.message)
    return None


def batch_event(event: WorkerEvent) -> Any:
    message = worker_pb2.BatchEvent(job_id=event.job_id)
    if isinstance(event, StepDone):
        message.progress.CopyFrom(
            common_pb2.Progress(step=event.step, total_steps=event.total_steps)
        )
        message.step_seconds = event.step_seconds
    elif isinstance(event, JobFinished):
        message.output.CopyFrom(
            worker_pb2.JobOutput(data=event.data, mime_type=event.mime_type, seed=event.seed)
        )
    elif isinstance(event, JobFailed):
        message.error.CopyFrom(common_pb2.Error(code=event.code, message=event.message))
    elif isinstance(event, JobPreempted):
        message.preempted.CopyFrom(
            worker_pb2.Preempted(checkpoint=event.checkpoint, step=event.step)
        )
    elif isinstance(event, JobCheckpointed):
        message.checkpointed.CopyFrom(
            worker_pb2.Checkpointed(checkpoint=event.checkpoint, step=event.step)
        )
    elif isinstance(event, JobNotice):
        message.notice.CopyFrom(common_pb2.Notice(kind=event.kind, message=event.message))
    return message


def priority_of(value: str) -> Priority:
    return Priority[value]
