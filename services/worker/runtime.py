"""The worker's owner: loaded models, one device thread, and the controls of running batches.

Torch runs only in the device thread. The event loop hands batches to it and receives
events back through `call_soon_threadsafe`, so status, cancel and drain stay responsive
while a batch runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as SpanStatus

from mediamesh.common.aio import wait_event
from mediamesh.common.errors import InvalidArgument, StatusCode
from mediamesh.common.params import check_generation, check_output
from mediamesh.common.telemetry import is_server_fault, log_job, tracer
from mediamesh.common.work import (
    JobCheckpointed,
    JobFailed,
    JobFinished,
    JobParams,
    JobPreempted,
    StepDone,
    WorkerEvent,
)
from mediamesh.worker import metrics
from mediamesh.worker.core.batch import BatchControl, DeviceGroupLost
from mediamesh.worker.core.gate import DeviceGate, Rank
from mediamesh.worker.core.handoff import Handoff
from mediamesh.worker.job_log import batch_logging
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.residency import Residency, residency_report

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger("mediamesh.worker")

# Threads for batches: one computes at a time (the gate), the others wait for the device,
# paused at a step boundary or not yet started. Enough for a running batch, the urgent
# batch that paused it and a next batch given ahead of time.
BATCH_THREADS = 4

_tracer = tracer("mediamesh.worker")

# Batches a worker remembers having ended: more than can end between two session messages.
ENDED_BATCHES_KEPT = 256


def _span_fields(event: WorkerEvent) -> dict[str, str | int | float]:
    fields: dict[str, str | int | float] = {"mediamesh.job_id": event.job_id}
    for name in ("step", "total_steps", "step_seconds", "code", "kind"):
        value = getattr(event, name, None)
        if value is not None:
            fields[f"mediamesh.{name}"] = value
    return fields


def _record_failure(span: Span, exc: BaseException) -> None:
    """The batch raised (its devices are gone, or the host broke): the span says why."""
    span.record_exception(exc)
    span.set_status(Status(SpanStatus.ERROR, f"{type(exc).__name__}: {exc}"))


class WorkerDraining(Exception):
    """The worker takes no new batches."""


@dataclass
class _Running:
    batch_id: str
    model: str
    control: BatchControl
    job_ids: list[str] = field(default_factory=list)
    # Jobs past their last step: a drain lets them finish rather than checkpoint them.
    finishing: set[str] = field(default_factory=set)


class WorkerRuntime:
    def __init__(
        self,
        worker_id: str,
        pool: str,
        hosts: dict[str, ModelHost],
        residency: Residency | None = None,
        release_team: Callable[[], None] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.pool = pool
        self.hosts = hosts
        # Which hosted models are loaded now (None: all of them, loaded at start).
        self.residency = residency
        # A device runs one batch at a time: each batch has a thread, the gate decides
        # which one computes (urgent first, then a paused batch, then in arrival order).
        self._device = ThreadPoolExecutor(max_workers=BATCH_THREADS, thread_name_prefix="device")
        # The devices of each batch in line or running, and those the holder of the gate
        # computes on: busy is measured from the gate, so that a batch given ahead of time
        # and waiting in line does not count, nor one that left the device to encode.
        self._batch_devices: dict[str, list[str]] = {}
        self._held_devices: list[str] = []
        # Frees the calling thread's OpenMP team (models/openmp.py): each batch thread's, as
        # it gives the device up.
        self.release_team = release_team
        self.gate = DeviceGate(on_hand_over=self._device_handed_over, on_leave=release_team)
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self.draining = False
        # Set once draining starts, for whoever reports the worker's health.
        self.drain_started = asyncio.Event()
        self.drained = asyncio.Event()
        # Why the worker cannot run batches any more (its devices are gone); set with
        # `faulted`, and then only a restart helps.
        self.fault: str | None = None
        self.faulted = asyncio.Event()
        # The scheduler may still be applying a batch's last events when the worker
        # leaves, so it asks the scheduler about these before closing its session.
        self.ended_batches: deque[str] = deque(maxlen=ENDED_BATCHES_KEPT)
        metrics.DEVICE_BUSY.declare({d for h in hosts.values() for d in h.device_ids})
        for reason in ("preempted", "periodic"):
            metrics.CHECKPOINTS.labels(reason)
        self.state_changed = asyncio.Event()

    @property
    def running_jobs(self) -> list[str]:
        return [j for r in self._running.values() for j in r.job_ids]

    @property
    def running_batches(self) -> int:
        return len(self._running)

    def loaded_adapters(self) -> dict[str, list[tuple[str, float]]]:
        """Per hosted model with any loaded: (adapter, load seconds), least recently used
        first; a snapshot, safe to take while the device thread loads more."""
        found: dict[str, list[tuple[str, float]]] = {}
        for name, host in self.hosts.items():
            cache = getattr(host, "adapters", None)
            loaded = cache.loaded() if cache is not None else []
            if loaded:
                found[name] = loaded
        return found

    def residency_report(self) -> dict[str, tuple[bool, float]]:
        """Per hosted model: (loaded now, last measured load seconds)."""
        return residency_report(self.hosts, self.residency)

    async def run_batch(
        self,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        *,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> AsyncIterator[WorkerEvent]:
        """The batch's events; raises DeviceGroupLost (after marking the worker faulted)
        when the devices it runs on are gone, leaving its unreported jobs to the scheduler.

        With `pause_batch_id` naming a batch running here, this batch is urgent: that one
        pauses at its next step boundary, this one runs, and then that one resumes.
        `trace_carrier`: W3C headers of the trace the batch was sent in, for the log lines
        of its failed jobs."""
        groups = self.run_batch_groups(
            batch_id, model, jobs, pause_batch_id, trace_carrier=trace_carrier
        )
        async for group in groups:
            for event in group:
                yield event

    async def run_batch_groups(
        self,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        *,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[WorkerEvent]]:
        """`run_batch`'s events in the groups they came in from the device thread (a step's
        progress for the whole batch arrives together), so the sender can pack each group."""
        carrier = dict(trace_carrier or {})
        try:
            async for group in self._run_batch(batch_id, model, jobs, pause_batch_id, carrier):
                yield group
        finally:
            self.ended_batches.append(batch_id)

    @staticmethod
    def _refused(
        batch_id: str, model: str, refusals: list[JobFailed], carrier: Mapping[str, str]
    ) -> list[WorkerEvent]:
        """Jobs refused before they ran: counted and logged like the jobs that ran and
        failed, or a worker sent jobs it cannot run showed no failures at all."""
        for refusal in refusals:
            metrics.JOBS.labels(model, refusal.code).inc()
            # The scheduler sent what this worker cannot run (a stale view of its models,
            # or past the model's limits): worth a look, but nothing here is broken.
            log_job(
                log,
                f"job refused on {model}",
                carrier,
                logging.WARNING,
                job_id=refusal.job_id,
                batch_id=batch_id,
                model=model,
                code=refusal.code,
                error=refusal.message,
            )
        return list(refusals)

    async def _run_batch(
        self,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str,
        carrier: Mapping[str, str],
    ) -> AsyncIterator[list[WorkerEvent]]:
        host = self.hosts.get(model)
        if self.draining:
            # Hand the jobs straight back, keeping any checkpoint, rather than fail them.
            yield [
                JobPreempted(job.job_id, job.resume_checkpoint or "", 0, wrote_checkpoint=False)
                for job in jobs
            ]
            return
        if host is None:
            message = f"model {model!r} not hosted"
            refusals = [JobFailed(j.job_id, StatusCode.FAILED_PRECONDITION, message) for j in jobs]
            yield self._refused(batch_id, model, refusals, carrier)
            return
        runnable = []
        refused: list[JobFailed] = []
        for job in jobs:
            try:
                # The scheduler checked the limits already, but a job past them (2**32 - 1
                # steps, a 4-gigapixel image) would hold the device or exhaust its memory
                # rather than fail, so whoever sends it is not trusted to be right.
                check_generation(host.spec, job.generation)
                check_output(host.spec, job.generation)
            except InvalidArgument as exc:
                refused.append(JobFailed(job.job_id, exc.code, exc.message))
            else:
                runnable.append(job)
        if refused:
            yield self._refused(batch_id, model, refused, carrier)
        if not runnable:
            return
        jobs = runnable
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[WorkerEvent | None] = asyncio.Queue()
        control = BatchControl([j.job_id for j in jobs])
        control.attach_gate(self.gate, batch_id)
        running = _Running(batch_id, model, control, [j.job_id for j in jobs])
        # In line before the pause is asked for, so the paused batch finds it waiting.
        paused = self._pausable(pause_batch_id, host)
        self._batch_devices[batch_id] = list(host.device_ids)
        self.gate.enqueue(batch_id, Rank.URGENT if paused is not None else Rank.NORMAL)
        if paused is not None:
            paused.control.request_pause()
        self._running[batch_id] = running
        self.state_changed.set()

        # Callable, so hosts emit into it directly; its `together()` packs a step's events.
        emit = Handoff(loop, events)

        def run() -> None:
            started = time.perf_counter()
            try:
                # Not at all if its caller has gone while it waited (`DeviceGate.withdraw`).
                if self.gate.acquire(batch_id):
                    try:
                        with batch_logging(batch_id, carrier):
                            host.run_batch(jobs, control, emit)
                    finally:
                        self.gate.release(batch_id)
            finally:
                metrics.BATCH_SECONDS.labels(model).observe(time.perf_counter() - started)
                emit.put(None)

        future = loop.run_in_executor(self._device, run)
        span = _tracer.start_span(
            "run batch",
            attributes={"mediamesh.batch_id": batch_id, "mediamesh.model": model},
        )
        # Whether the span says ERROR already (a job failed by the worker's fault).
        failed = False
        try:
            ended = False
            while not ended:
                group = [await events.get()]
                # Whatever else the device thread has handed over goes in the same group.
                while not events.empty():
                    group.append(events.get_nowait())
                if group[-1] is None:
                    ended = True
                    group.pop()
                ready = [event for event in group if event is not None]
                running.finishing.update(
                    e.job_id for e in ready if isinstance(e, StepDone) and e.step >= e.total_steps
                )
                fault = self._count(model, span, ready)
                if fault is not None and not failed:
                    # The first failure names the span's status; the others are its events.
                    failed = True
                    span.set_status(Status(SpanStatus.ERROR, fault))
                if ready:
                    yield ready
        finally:
            # The caller went away (scheduler restart or cancel): stop at the next step.
            control.cancel(running.job_ids)
            try:
                await asyncio.shield(future)
            except DeviceGroupLost as lost:
                self.lose_devices(str(lost))
                _record_failure(span, lost)
                raise
            except Exception as exc:
                _record_failure(span, exc)
                raise
            finally:
                # A batch whose thread never started (shut down) must not block the line.
                self.gate.withdraw(batch_id)
                self._batch_devices.pop(batch_id, None)
                span.end()
                self._running.pop(batch_id, None)
                self.state_changed.set()
                # Draining may have begun while the batch ran (`draining` was False above).
                if self.drain_started.is_set() and not self._running:
                    self.drained.set()

    def _device_handed_over(self, previous: str | None, holder: str | None) -> None:
        # Under the gate's lock, in whichever thread takes or gives up the device. The
        # devices released are those recorded when the device was taken: the batch's entry
        # may be gone by then (its caller left while its thread still ran).
        if previous is not None:
            metrics.DEVICE_BUSY.release(self._held_devices)
            self._held_devices = []
        if holder is not None:
            self._held_devices = self._batch_devices.get(holder, [])
            metrics.DEVICE_BUSY.hold(self._held_devices)

    @staticmethod
    def _count(model: str, span: Span, events: list[WorkerEvent]) -> str | None:
        """Metrics and span events of a group of a batch's events; returns what failed the
        first job that failed by the worker's fault, if one did.

        The span's status follows OpenTelemetry's rule for SERVER spans: a job refused or
        failed for what its request asked (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) or
        cancelled by its caller leaves it UNSET, since the worker did its part; INTERNAL,
        UNAVAILABLE and the like make it ERROR, as a crashed call would."""
        last_step = None
        fault = None
        for event in events:
            span.add_event(type(event).__name__, _span_fields(event))
            if isinstance(event, StepDone):
                # One observation per batch step: each job of the step reports the same time.
                if event.step_seconds > 0 and event.step != last_step:
                    metrics.STEP_SECONDS.labels(model).observe(event.step_seconds)
                last_step = event.step
            elif isinstance(event, JobPreempted) and event.wrote_checkpoint:
                metrics.CHECKPOINTS.labels("preempted").inc()
            elif isinstance(event, JobCheckpointed):
                metrics.CHECKPOINTS.labels("periodic").inc()
            elif isinstance(event, JobFinished):
                metrics.JOBS.labels(model, "SUCCEEDED").inc()
            elif isinstance(event, JobFailed):
                metrics.JOBS.labels(model, event.code).inc()
                if fault is None and is_server_fault(event.code):
                    fault = f"job {event.job_id} failed: {event.code}: {event.message}"
        return fault

    def _pausable(self, batch_id: str, urgent: ModelHost) -> _Running | None:
        """The running batch to pause for an urgent batch of `urgent`'s model, if it may be.

        A model with a step cache keeps per-loop state in its transformer's hooks, which
        a batch of the same model run meanwhile would reset, so such a batch is not paused
        for its own model (the scheduler does not ask for that either)."""
        running = self._running.get(batch_id) if batch_id else None
        if running is None:
            return None
        if running.model == urgent.spec.name and urgent.spec.cache is not None:
            return None
        return running

    def cancel(self, job_ids: list[str]) -> list[str]:
        """Stop `job_ids` for good (the scheduler ended them): their checkpoints go too."""
        found: list[str] = []
        for running in list(self._running.values()):
            found.extend(running.control.cancel(job_ids, discard_checkpoints=True))
        return found

    def lose_devices(self, reason: str) -> None:
        """The devices are gone (a tensor-parallel rank died). Every batch would fail, and
        failing fast would make this worker look idle and draw more work, so it takes no
        more batches and asks to be restarted: `faulted` is for its supervisor."""
        if self.fault is None:
            log.error("worker %s lost its devices: %s; it must restart", self.worker_id, reason)
            self.fault = reason
        self.start_drain()
        self.faulted.set()

    def start_drain(self) -> list[str]:
        """Stop taking batches and ask running ones to checkpoint at their next step; the
        jobs that stops (not those past their last step, which finish here)."""
        self.draining = True
        self.drain_started.set()
        preempting = [
            job_id
            for running in self._running.values()
            for job_id in running.job_ids
            if job_id not in running.finishing
        ]
        for running in self._running.values():
            running.control.preempt()
        if not self._running:
            self.drained.set()
        self.state_changed.set()
        return preempting

    async def wait_drained(self, grace_s: float) -> bool:
        return await wait_event(self.drained, grace_s)

    def close(self) -> None:
        for running in self._running.values():
            running.control.cancel(running.job_ids)
        self._device.shutdown(wait=True, cancel_futures=True)
        for host in self.hosts.values():
            try:
                host.close()
            except Exception:
                log.exception("closing a model host failed")
