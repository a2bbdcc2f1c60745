"""Spans the scheduler adds to each request's trace: time in the queue, and the batch."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from opentelemetry import trace

from mediamesh.common.telemetry import context_from, tracer
from mediamesh.scheduler.core.effects import Dispatch
from mediamesh.scheduler.core.jobs import Job, JobState

_tracer = tracer("mediamesh.scheduler")


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@contextlib.contextmanager
def batch_span(dispatch: Dispatch) -> Iterator[trace.Span]:
    """A `queue wait` span per job, then one `batch` span that the RunBatch call runs under.

    The batch belongs to its first job's trace and links to the others, so every job's
    trace leads to the worker that ran it.
    """
    contexts = [context_from(job.trace_carrier) for job in dispatch.jobs]
    for job, wait, context in zip(dispatch.jobs, dispatch.waits, contexts, strict=True):
        if context is None:
            continue
        dispatched_at = job.enqueued_at + wait
        span = _tracer.start_span(
            "queue wait",
            context=context,
            start_time=_ns(job.enqueued_at),
            attributes={"mediamesh.job_id": job.job_id, "mediamesh.queue": job.queue},
        )
        span.end(end_time=_ns(dispatched_at))
    parent = next((c for c in contexts if c is not None), None)
    links = [trace.Link(trace.get_current_span(c).get_span_context()) for c in contexts[1:] if c]
    with _tracer.start_as_current_span(
        "batch",
        context=parent,
        links=links,
        attributes={
            "mediamesh.batch_id": dispatch.batch_id,
            "mediamesh.model": dispatch.model,
            "mediamesh.worker_id": dispatch.worker_id,
            "mediamesh.batch_size": len(dispatch.jobs),
        },
    ) as span:
        yield span


def job_failed(span: trace.Span, job_id: str, code: str, message: str, *, first: bool) -> None:
    """A job of the batch ended FAILED: the batch span says ERROR, whatever the code.

    OpenTelemetry leaves a SERVER span UNSET for a code the caller caused, because the call
    did what it should; but this span is the job's run, not a call, and a job ending FAILED
    is that run going wrong (a caller's bad request is refused at Submit and never gets
    here). The `first` failure names the status; later ones only add events."""
    span.add_event("job failed", {"mediamesh.job_id": job_id, "mediamesh.code": code})
    if first:
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"job {job_id} {code}: {message}"))


def batch_failed(span: trace.Span, exc: BaseException) -> None:
    """The batch's call failed (never delivered, the worker gone, a broken stream)."""
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def ended_in_queue(job: Job, state: JobState, reason: str) -> None:
    """The `queue wait` span of a job that ended while it waited (expired, cancelled, failed
    with its queue), which no dispatch ends: without it, the trace of a job that never ran
    showed no time in the scheduler at all. It is ERROR unless the job was cancelled."""
    context = context_from(job.trace_carrier)
    if context is None:
        return
    span = _tracer.start_span(
        "queue wait",
        context=context,
        start_time=_ns(job.enqueued_at or job.created_at),
        attributes={
            "mediamesh.job_id": job.job_id,
            "mediamesh.queue": job.queue,
            "mediamesh.state": state.value,
        },
    )
    if state is not JobState.CANCELLED:
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{state.value}: {reason}"))
    span.end(end_time=_ns(job.finished_at or time.time()))
