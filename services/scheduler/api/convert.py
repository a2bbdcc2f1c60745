"""Protobuf <-> scheduler types. The only scheduler module that builds messages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2
from mediamesh.common.registry import MODEL_FIELDS, ModelSpec
from mediamesh.common.warmup import warmup_label
from mediamesh.scheduler.core.job_listing import JobQuery
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.model_statistics import Duration, ModelStatistics
from mediamesh.scheduler.events import WatchEvent
from mediamesh.scheduler.store.artifacts import SignedUrl, StoredArtifact


def state(value: JobState) -> str:
    """The wire name of a job state: JobState's values are the proto enum's names, and message
    constructors take an enum by name (rejecting one the proto lacks)."""
    return value.value


def job_query(request: gateway_pb2.ListJobsRequest) -> JobQuery:
    """The core's query for a ListJobs request; InvalidArgument naming a state it lacks."""
    states: set[JobState] = set()
    for index, number in enumerate(request.states):
        name = common_pb2.JobState.Name(number) if number in common_pb2.JobState.values() else ""
        if name not in JobState.__members__:
            raise InvalidArgument(
                f"states[{index}]: {name or number} is not a job state; use one of "
                f"{', '.join(JobState.__members__)}"
            )
        states.add(JobState(name))
    return JobQuery(
        states=frozenset(states),
        models=frozenset(request.models),
        page_size=request.page_size,
        after_job_id=request.after_job_id,
        oldest_first=request.oldest_first,
    )


def result_message(
    artifact: StoredArtifact | None,
    inline_limit: int,
    data: bytes | None,
    url: SignedUrl | None = None,
) -> common_pb2.Result:
    """A job's Result: the bytes inline when `data` is given and fits `inline_limit`, else an
    artifact reference to Download, with its presigned `url` when there is one. Empty when
    there is no artifact."""
    if artifact is None:
        return common_pb2.Result()
    ref = common_pb2.ArtifactRef(size_bytes=artifact.size_bytes, sha256=artifact.sha256)
    if data is not None and artifact.size_bytes <= inline_limit:
        return common_pb2.Result(data=data, mime_type=artifact.mime_type, seed=artifact.seed)
    result = common_pb2.Result(mime_type=artifact.mime_type, seed=artifact.seed, artifact=ref)
    if url is not None:
        result.url = url.url
        result.url_expires_unix_ms = url.expires_unix_ms
    return result


def generate_event(
    event: WatchEvent, data: bytes | None, inline_limit: int, url: SignedUrl | None = None
) -> common_pb2.GenerateEvent:
    """The GenerateEvent for a watch event; `data` is the artifact's bytes if read to inline,
    `url` its presigned URL if one was made."""
    message = common_pb2.GenerateEvent(job_id=event.job_id, state=state(event.state))
    if event.kind == "queued":
        message.queued.CopyFrom(
            common_pb2.Queued(position=event.position, eta_s=event.eta_s, queue=event.queue)
        )  # eta_s=None leaves the optional field unset
    elif event.kind == "progress":
        message.progress.CopyFrom(
            common_pb2.Progress(
                step=event.step, total_steps=event.total_steps, attempt=event.attempt
            )
        )
        if event.preview is not None:
            message.progress.preview.CopyFrom(
                common_pb2.Preview(data=event.preview.data, mime_type=event.preview.mime_type)
            )
    elif event.kind == "result":
        message.result.CopyFrom(result_message(event.artifact, inline_limit, data, url))
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


def job_info(
    job: Job,
    artifact: StoredArtifact | None,
    url: SignedUrl | None = None,
    paused: bool = False,
    retention_s: float = 0.0,
) -> common_pb2.JobInfo:
    """The JobInfo of `job`; a succeeded job's result is always a reference, never inline
    bytes, with its presigned `url` when there is one. `paused` is the core's word
    (`SchedulingCore.is_paused`): the job itself does not record it. An ended job expires
    `retention_s` after its end (none given: no expiry is told)."""
    p = job.params
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
        total_steps=job.total_steps or p.steps,
        seed=p.seed,
        worker_id=job.worker_id or job.last_worker_id,
        batch_id=job.batch_id or "",
        prompt=p.prompt,
        steps=p.steps,
        width=p.width,
        height=p.height,
        num_frames=p.num_frames,
        fps=p.fps,
        paused=paused,
    )
    if job.finished_at and retention_s:
        info.expires_unix_ms = int((job.finished_at + retention_s) * 1000)
    if artifact is not None and job.state is JobState.SUCCEEDED:
        info.result.CopyFrom(result_message(artifact, 0, None, url))
    if job.error_code:
        info.error.CopyFrom(common_pb2.Error(code=job.error_code, message=job.error_message))
    return info


def model_info(
    spec: ModelSpec,
    devices: list[str],
    warming: bool = False,
    preemption: str = "",
    cold: bool = False,
) -> common_pb2.ModelInfo:
    """The ModelInfo of `spec`, ready when any `devices` (worker/device labels) serve it;
    `warming` when a worker hosting it is still running its warm-up; `preemption` is
    "resume", "restart" or "" (unknown), see `common.preemption`; `cold` when every worker
    serving it holds it unloaded."""
    d, lim = spec.defaults, spec.limits
    return common_pb2.ModelInfo(
        name=spec.name,
        modality=spec.modality,
        pipeline=spec.pipeline,
        parallelism=spec.parallelism.mode,
        ready=bool(devices),
        warmup=warmup_label(spec, bool(devices), warming, loaded=not cold),
        mime_type=spec.output.mime_type,
        devices=devices,
        accepted_fields=[f for f in MODEL_FIELDS if f in spec.accepted_fields],
        output_formats=list(spec.output_formats),
        preemption=preemption,
        previews=spec.preview.enabled,
        inputs=list(spec.inputs),
        default_strength=spec.default_strength,
        adapters=[
            common_pb2.AdapterInfo(name=a.name, default_scale=a.default_scale)
            for a in spec.adapters
        ],
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
            max_prompt_chars=lim.max_prompt_chars,
        ),
    )


def list_models(
    specs: list[ModelSpec],
    devices: dict[str, list[str]],
    warming: frozenset[str] = frozenset(),
    preemption: dict[str, str] | None = None,
    cold: frozenset[str] = frozenset(),
) -> gateway_pb2.ListModelsResponse:
    """The ListModelsResponse for `specs`; `devices` maps a model name to its serving devices,
    `warming` names models a worker is warming up, `preemption` maps a name to "resume" or
    "restart", `cold` names served models no serving worker holds loaded."""
    modes = preemption or {}
    return gateway_pb2.ListModelsResponse(
        models=[
            model_info(
                s,
                devices.get(s.name, []),
                s.name in warming,
                modes.get(s.name, ""),
                cold=s.name in cold,
            )
            for s in specs
        ]
    )


def priority_of(value: str) -> Priority:
    """The Priority named `value`; KeyError for an unknown name."""
    return Priority[value]


def hosted_adapters(
    models: Iterable[scheduler_pb2.HostedModel],
) -> dict[str, dict[str, float]]:
    """Per registered model, its loaded LoRA adapters and their load seconds."""
    return {m.name: {a.name: a.load_seconds for a in m.adapters} for m in models}


def reported_adapters(
    reported: Iterable[scheduler_pb2.ModelAdapters],
) -> dict[str, dict[str, float]]:
    """A heartbeat's loaded LoRA adapters per model, with their load seconds."""
    return {m.model: {a.name: a.load_seconds for a in m.adapters} for m in reported}


def hosted_residency(
    models: Iterable[scheduler_pb2.HostedModel],
) -> dict[str, tuple[bool, float]] | None:
    """Per registered or reported model: (loaded now, last load seconds); None when the
    worker reported none (an empty list: a heartbeat without residency)."""
    report = {m.name: (m.resident, m.load_seconds) for m in models}
    return report or None


def unit_adapters(adapters: Mapping[str, frozenset[str]]) -> list[scheduler_pb2.ModelAdapters]:
    """WorkerSummary.adapters: a unit's loaded adapters per model, sorted by name."""
    return [
        scheduler_pb2.ModelAdapters(
            model=model, adapters=[scheduler_pb2.LoadedAdapter(name=n) for n in sorted(names)]
        )
        for model, names in sorted(adapters.items())
        if names
    ]


def _phase(duration: Duration) -> scheduler_pb2.PhaseDuration:
    return scheduler_pb2.PhaseDuration(count=duration.count, ns=duration.ns)


def model_statistics(model: str, stats: ModelStatistics) -> scheduler_pb2.ModelStatistics:
    """One model's statistics, batch sizes smallest first."""
    return scheduler_pb2.ModelStatistics(
        model=model,
        last_inference_unix_ms=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
        success=_phase(stats.success),
        fail=_phase(stats.fail),
        queue=_phase(stats.queue),
        compute_input=_phase(stats.compute_input),
        compute_infer=_phase(stats.compute_infer),
        compute_output=_phase(stats.compute_output),
        batch_sizes=[
            scheduler_pb2.BatchSizeStatistics(
                batch_size=size,
                compute_input=_phase(sized.compute_input),
                compute_infer=_phase(sized.compute_infer),
                compute_output=_phase(sized.compute_output),
            )
            for size, sized in sorted(stats.batch_sizes.items())
        ],
    )
