"""Running one dispatched batch: the RunBatch stream to a worker, and what its events mean.

Each worker event becomes a core call; results go to the artifact store before the job is
marked SUCCEEDED, so a SUCCEEDED job always has its artifact.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mediamesh.common.errors import StatusCode
from mediamesh.common.settings import SchedulerSettings
from mediamesh.common.work import (
    JobCheckpointed,
    JobFailed,
    JobFinished,
    JobNotice,
    JobParams,
    JobPreempted,
    StepDone,
    WorkerEvent,
)
from mediamesh.scheduler import metrics, tracing
from mediamesh.scheduler.core.effects import Dispatch, Effect, Transition
from mediamesh.scheduler.core.interface import SchedulingCore
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.core.model_statistics import BatchTimer, RanJob, StatisticsLedger
from mediamesh.scheduler.events import EventHub, notice_event
from mediamesh.scheduler.store.artifacts import ArtifactStore, StoredArtifact
from mediamesh.scheduler.store.writer import StoreWriter

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger("mediamesh.scheduler")


class BatchUndelivered(Exception):
    """The worker never took the batch (unreachable, or the call was refused before its
    batch code ran), so none of its jobs started there."""


class WorkerGone(Exception):
    """The worker took the batch, then its stream broke with the connection (the process
    died, or the network between them did): nothing more will come of the batch there."""


def lost_jobs_text(effects: list[Effect], worker_id: str) -> str:
    """What became of a lost worker's jobs, from the effects of giving it up: those that go
    back in line and those that used their last attempt, so the warning never promises a
    requeue that a job at max_attempts does not get."""
    ended = [e for e in effects if isinstance(e, Transition) and e.worker_id == worker_id]
    requeued = sum(e.state is JobState.QUEUED for e in ended)
    failed = sum(e.state is JobState.FAILED for e in ended)
    if not requeued and not failed:
        return "its jobs were already given up on with the worker, which must register again"
    return (
        f"of the jobs it was running, {requeued} requeued at the front of the line and "
        f"{failed} failed (max_attempts used up); the worker must register again"
    )


class WorkerLink(Protocol):
    """How the scheduler reaches workers (gRPC in the service, in-process in tests)."""

    def run_batch(
        self,
        address: str,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        trace_context: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[WorkerEvent]]:
        """The batch's events, in the groups they arrived in (a step of the whole batch is
        one group); raises BatchUndelivered if the worker never took it.
        `pause_batch_id`: a batch on that worker to pause at its next step for this one.
        `trace_context`: the batch's trace (its first job's W3C headers), for the worker's
        log lines when this process does not trace (a tracing one sends its own span's)."""
        ...

    def reset(self, address: str) -> None:
        """Forget any connection to `address`; the next batch there opens a fresh one."""
        ...

    async def cancel(self, address: str, job_ids: list[str]) -> None: ...

    async def close(self) -> None: ...


class BatchRunner:
    def __init__(
        self,
        core: SchedulingCore,
        store: StoreWriter,
        artifacts: ArtifactStore,
        link: WorkerLink,
        settings: SchedulerSettings,
        hub: EventHub,
        results: dict[str, StoredArtifact],
        apply: Callable[[list[Effect]], None],
        kick: Callable[[], None],
        statistics: StatisticsLedger,
    ) -> None:
        self.core = core
        self.store = store
        self.artifacts = artifacts
        self.link = link
        self.settings = settings
        self.hub = hub
        self.results = results
        self.apply = apply
        self.kick = kick
        self.statistics = statistics
        # Batches whose stream is open or whose events are still being applied; each
        # event is set once the last of them is.
        self._open: dict[str, asyncio.Event] = {}

    def _job_params(self, job: Job) -> JobParams:
        every = self.settings.checkpoint_every_steps.get(job.queue, 0)
        return JobParams(
            job_id=job.job_id,
            generation=job.params,
            resume_checkpoint=job.checkpoint,
            checkpoint_every_steps=every,
        )

    async def run(self, dispatch: Dispatch) -> None:
        metrics.BATCH_SIZE.labels(dispatch.model).observe(len(dispatch.jobs))
        for job, wait in zip(dispatch.jobs, dispatch.waits, strict=True):
            metrics.QUEUE_WAIT.labels(job.queue, job.priority.name).observe(wait)
        params = [self._job_params(j) for j in dispatch.jobs]
        batch_id = dispatch.batch_id
        failed: list[str] = []
        timer = BatchTimer(time.monotonic())
        with tracing.batch_span(dispatch) as span:
            applied = self._open[batch_id] = asyncio.Event()
            try:
                # Each only when there is one, so links that take neither keep working: the
                # batch to pause (urgent batches), and the batch's trace (its first job's).
                options: dict[str, Any] = {
                    "pause_batch_id": dispatch.pauses,
                    "trace_context": dispatch.jobs[0].trace_carrier,
                }
                stream = self.link.run_batch(
                    dispatch.address,
                    batch_id,
                    dispatch.model,
                    params,
                    **{name: value for name, value in options.items() if value},
                )
                async for events in stream:
                    arrived = time.monotonic()
                    for event in events:
                        if isinstance(event, StepDone):
                            timer.step(event.step, event.step_seconds, arrived)
                        elif isinstance(event, JobFinished):
                            timer.result(event.job_id, arrived)
                        await self._on_worker_event(batch_id, event)
                        self._note_failure(span, event, failed)
                    # Once per group: a step of a batch of 16 is one scheduling pass, not 16.
                    self.apply(self.core.take_effects())
            except BatchUndelivered as exc:
                log.warning(
                    "batch %s never reached %s (%s); its jobs go back to the front of the "
                    "line and the worker must register again",
                    batch_id,
                    dispatch.worker_id,
                    exc,
                )
                tracing.batch_failed(span, exc)
                self.core.batch_undelivered(batch_id, f"worker unreachable: {exc}")
            except WorkerGone as exc:
                # Given up on at once, before the batch's end requeues its jobs: a worker
                # still registered would be handed them straight back, a second batch its
                # death would cost them (one more lost worker out of their max_attempts).
                tracing.batch_failed(span, exc)
                self.core.worker_lost(dispatch.worker_id, f"batch stream broke: {exc}")
                effects = self.core.take_effects()
                log.warning(
                    "batch %s lost its worker %s (%s); %s",
                    batch_id,
                    dispatch.worker_id,
                    exc,
                    lost_jobs_text(effects, dispatch.worker_id),
                )
                self.apply(effects)
            except Exception as exc:
                tracing.batch_failed(span, exc)
                log.warning(
                    "batch %s on %s ended with an error: %s", batch_id, dispatch.worker_id, exc
                )
            finally:
                self.core.batch_ended(batch_id)
                self.apply(self.core.take_effects())
                # The worker has room again. Ending a batch has no effects of its own, and
                # the pass the last result kicked ran while the stream was still open, so
                # without this the queue waits for the next arrival or the loop's tick.
                self.kick()
                self._open.pop(batch_id, None)
                applied.set()
                # Last: the batch's bookkeeping above must not depend on its statistics.
                self._count(dispatch, timer)

    def _count(self, dispatch: Dispatch, timer: BatchTimer) -> None:
        """The batch in the models' inference statistics, if it reached a step or a result."""
        times = timer.times()
        if times is None:
            return
        jobs = [
            RanJob(job.tenant, wait, timer.output_of(job.job_id))
            for job, wait in zip(dispatch.jobs, dispatch.waits, strict=True)
        ]
        self.statistics.batch_ran(dispatch.model, jobs, times)

    def _note_failure(self, span: Span, event: WorkerEvent, failed: list[str]) -> None:
        """Mark the batch span when the event ended its job FAILED (a failure the core
        retries, or a result the store could not keep, is told by the job's state)."""
        if not isinstance(event, (JobFailed, JobFinished)):
            return
        job = self.core.jobs.get(event.job_id)
        if job is None or job.state is not JobState.FAILED or event.job_id in failed:
            return
        tracing.job_failed(span, job.job_id, job.error_code, job.error_message, first=not failed)
        failed.append(job.job_id)

    def unapplied(self, batch_ids: list[str]) -> list[str]:
        """The batches among `batch_ids` with events still to apply: a batch not open here
        either ended with all its events applied or was never this scheduler's."""
        return [b for b in batch_ids if b in self._open]

    async def wait_applied(self, batch_ids: list[str], timeout_s: float) -> None:
        """Return once every listed batch has had all its events applied, or after
        `timeout_s`, whichever is first."""
        waits = [self._open[b].wait() for b in self.unapplied(batch_ids)]
        if waits:
            # asyncio.timeout: wait_for on Python 3.11 can drop a cancellation that lands
            # as the wait ends (see common/aio.py).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await asyncio.gather(*waits)

    async def _on_worker_event(self, batch_id: str, event: WorkerEvent) -> None:
        core = self.core
        if isinstance(event, StepDone):
            core.job_progress(
                event.job_id,
                batch_id,
                event.step,
                event.total_steps,
                event.step_seconds,
                event.preview,
            )
            job = core.jobs.get(event.job_id)
            unit = core.units.get(job.worker_id or "") if job else None
            if job is not None and unit is not None and event.step_seconds > 0:
                share = event.step_seconds / core.batch_size(batch_id)
                price = core.policy.prices_per_device_hour.get(unit.pool, 0.0)
                metrics.DEVICE_SECONDS.labels(unit.pool, job.model).inc(share)
                metrics.COST.labels(unit.pool).inc(share / 3600 * price)
        elif isinstance(event, JobFinished):
            job = core.jobs.get(event.job_id)
            if job is None or job.batch_id != batch_id or not job.state.in_flight:
                return
            try:
                artifact = await self.artifacts.write(
                    event.job_id, event.data, event.mime_type, event.seed
                )
            except Exception as exc:  # the rest of the batch must still be heard
                metrics.RESULT_WRITE_FAILURES.inc()
                log.error("the result of job %s could not be stored: %s", event.job_id, exc)
                # The detail stays in the log: it may name internal hosts.
                message = "the result was made but could not be stored; submit the job again"
                core.job_failed(event.job_id, batch_id, StatusCode.UNAVAILABLE, message)
                return
            self.results[event.job_id] = artifact
            if core.job_succeeded(event.job_id, batch_id) is None:
                self.results.pop(event.job_id, None)
                await self.artifacts.delete(artifact.path)
        elif isinstance(event, JobFailed):
            core.job_failed(event.job_id, batch_id, event.code, event.message)
        elif isinstance(event, JobPreempted):
            job = core.jobs.get(event.job_id)
            unit = core.units.get(job.worker_id) if job and job.worker_id else None
            pool = unit.pool if unit else ""
            if core.job_preempted(event.job_id, batch_id, event.checkpoint, event.step):
                metrics.PREEMPTIONS.labels(pool or "unknown").inc()
        elif isinstance(event, JobCheckpointed):
            core.job_checkpointed(event.job_id, batch_id, event.checkpoint, event.step)
            job = core.jobs.get(event.job_id)
            if job is not None and job.checkpoint == event.checkpoint:
                # Written now, not at its next transition: a restart must resume from here.
                self.store.save(job)
        elif isinstance(event, JobNotice):
            job = core.jobs.get(event.job_id)
            if (
                job is not None
                and event.fitted_batch
                and core.batch_fitted(event.job_id, event.fitted_batch)
            ):
                log.warning(
                    "batches of %s at %dx%d are capped at %d after running out of memory",
                    job.model,
                    job.params.width,
                    job.params.height,
                    event.fitted_batch,
                )
            if job is not None and event.kind == "paused":
                metrics.PAUSES.labels(job.priority.name).inc()
                core.job_paused(event.job_id, batch_id)
            elif event.kind == "resumed":
                core.job_resumed(event.job_id)
            if job is not None:
                self.hub.publish(notice_event(job, event.kind, event.message))
