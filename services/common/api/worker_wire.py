"""The Worker service's wire format: batch requests and events, both directions.

Shared by the scheduler (which sends batches and reads events) and the worker (which
does the reverse), so the two ends can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from mediamesh.common.api.input_wire import input_image, input_ref
from mediamesh.common.generated.v1 import common_pb2, worker_pb2
from mediamesh.common.generation import AdapterScale, GenerationParams
from mediamesh.common.work import (
    JobCheckpointed,
    JobFailed,
    JobFinished,
    JobNotice,
    JobParams,
    JobPreempted,
    Preview,
    StepDone,
    WorkerEvent,
)

# Initial-metadata key a worker sends as soon as it takes a RunBatch call. A call that ends
# without it never reached the worker's batch code: the jobs did not run there.
BATCH_ACCEPTED_KEY = "mediamesh-batch-accepted"


def job_spec(params: JobParams, deadline_ms: int) -> worker_pb2.JobSpec:
    """The JobSpec sending `params` to a worker; `deadline_ms` is Unix ms, 0 for none."""
    g = params.generation
    return worker_pb2.JobSpec(
        job_id=params.job_id,
        prompt=g.prompt,
        negative_prompt=g.negative_prompt,
        steps=g.steps,
        seed=g.seed,
        width=g.width,
        height=g.height,
        num_frames=g.num_frames,
        guidance_scale=g.guidance_scale,
        duration_s=g.duration_s,
        output_format=g.output_format,
        output_quality=g.output_quality,
        fps=g.fps,
        image=input_ref(g.image),
        mask_image=input_ref(g.mask_image),
        strength=g.strength,
        adapters=[common_pb2.AdapterRef(name=a.name, scale=a.scale) for a in g.adapters],
        use_cache=g.use_cache,
        preview_every_steps=g.preview_every_steps,
        deadline_unix_ms=deadline_ms,
        resume_checkpoint=params.resume_checkpoint or "",
        checkpoint_every_steps=params.checkpoint_every_steps,
    )


def _as_sent(value: float) -> float:
    """A float32 field as its sender wrote it (0.6, not 0.6000000238): six significant
    digits, as many as a float32 always keeps (FLT_DIG), so that no value above 0 becomes 0
    (1e-7 stays 1e-7)."""
    return float(f"{value:.6g}")


def job_params(s: worker_pb2.JobSpec) -> JobParams:
    """The JobParams of a received JobSpec: `job_spec` in reverse, less the deadline."""
    generation = GenerationParams(
        prompt=s.prompt,
        negative_prompt=s.negative_prompt,
        steps=s.steps,
        seed=s.seed,
        width=s.width,
        height=s.height,
        num_frames=s.num_frames,
        guidance_scale=s.guidance_scale,
        duration_s=_as_sent(s.duration_s),
        output_format=s.output_format,
        output_quality=s.output_quality,
        fps=s.fps,
        image=input_image(s.image),
        mask_image=input_image(s.mask_image),
        strength=_as_sent(s.strength),
        adapters=tuple(AdapterScale(a.name, _as_sent(a.scale)) for a in s.adapters),
        use_cache=s.use_cache,
        preview_every_steps=s.preview_every_steps,
    )
    return JobParams(
        job_id=s.job_id,
        generation=generation,
        resume_checkpoint=s.resume_checkpoint or None,
        checkpoint_every_steps=s.checkpoint_every_steps,
    )


def worker_events(m: worker_pb2.BatchEvent) -> list[WorkerEvent]:
    """The WorkerEvents a BatchEvent carries: one per job it names; none for an event kind
    this build does not know."""
    kind = m.WhichOneof("event")
    if kind == "progress":
        p = m.progress
        preview = Preview(p.preview.data, p.preview.mime_type) if p.HasField("preview") else None
        first = StepDone(m.job_id, p.step, p.total_steps, m.step_seconds, preview)
        more = (
            StepDone(job_id, p.step, p.total_steps, m.step_seconds) for job_id in m.more_job_ids
        )
        return [first, *more]
    event = _job_event(kind, m)
    return [] if event is None else [event]


def _job_event(kind: str | None, m: worker_pb2.BatchEvent) -> WorkerEvent | None:
    job_id = m.job_id
    if kind == "output":
        o = m.output
        return JobFinished(job_id, o.data, o.mime_type, o.seed)
    if kind == "error":
        return JobFailed(job_id, m.error.code, m.error.message)
    if kind == "preempted":
        pre = m.preempted
        return JobPreempted(job_id, pre.checkpoint, pre.step)
    if kind == "checkpointed":
        c = m.checkpointed
        return JobCheckpointed(job_id, c.checkpoint, c.step)
    if kind == "notice":
        return JobNotice(job_id, m.notice.kind, m.notice.message, m.fitted_batch)
    return None


def batch_events(events: Sequence[WorkerEvent]) -> list[worker_pb2.BatchEvent]:
    """The BatchEvents that send `events`, in order: a run of preview-less StepDones of one
    step goes as one message (a batch of 16 sends one per step, not 16)."""
    messages: list[worker_pb2.BatchEvent] = []
    shared: StepDone | None = None  # the step the last message stands for, when it may grow
    for event in events:
        if isinstance(event, StepDone) and event.preview is None:
            key = (event.step, event.total_steps, event.step_seconds)
            if shared is not None and key == (shared.step, shared.total_steps, shared.step_seconds):
                messages[-1].more_job_ids.append(event.job_id)
                continue
            shared = event
        else:
            shared = None
        messages.append(batch_event(event))
    return messages


def batch_event(event: WorkerEvent) -> worker_pb2.BatchEvent:
    """The BatchEvent that sends `event` alone (the inverse of `worker_events`)."""
    message = worker_pb2.BatchEvent(job_id=event.job_id)
    if isinstance(event, StepDone):
        message.progress.CopyFrom(
            common_pb2.Progress(step=event.step, total_steps=event.total_steps)
        )
        if event.preview is not None:
            message.progress.preview.CopyFrom(
                common_pb2.Preview(data=event.preview.data, mime_type=event.preview.mime_type)
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
        message.fitted_batch = event.fitted_batch
    return message
