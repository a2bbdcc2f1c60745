"""The scheduler's owner task: drives the pure core and carries out its effects.

Every core call happens on the event loop and returns at once; effects are applied right
after, in order: store writes are queued to the `StoreWriter`, events go to watchers,
batches and cancels go to workers through a `WorkerLink`. A new job is different: it is in
the store before the core queues it (`Submissions`), so a failing store runs no unrecorded job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

from mediamesh.common.aio import wait_event
from mediamesh.common.errors import FailedPrecondition, MeshError, NotFound
from mediamesh.common.log_throttle import LogThrottle
from mediamesh.common.settings import SchedulerSettings
from mediamesh.common.telemetry import log_job
from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler import metrics, tracing
from mediamesh.scheduler.batches import BatchRunner, WorkerLink
from mediamesh.scheduler.checkpoints import CheckpointFiles
from mediamesh.scheduler.core.effects import (
    CancelOnWorker,
    Dispatch,
    Effect,
    Notice,
    Progressed,
    Transition,
)
from mediamesh.scheduler.core.interface import INVALID_REQUEST, NewJob, SchedulingCore
from mediamesh.scheduler.core.job_listing import JobQuery
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.model_statistics import StatisticsLedger
from mediamesh.scheduler.core.units import WorkerInfo
from mediamesh.scheduler.ended_jobs import EndedJobs, JobRecord
from mediamesh.scheduler.events import EventHub, WatchEvent, notice_event
from mediamesh.scheduler.inputs import job_inputs
from mediamesh.scheduler.removal import ORPHAN_RESULT_MARGIN_S, RESULT_SWEEP_INTERVAL_S, JobRemoval
from mediamesh.scheduler.result_usage import ResultUsage
from mediamesh.scheduler.roster import WorkerRoster
from mediamesh.scheduler.store.artifacts import ArtifactStore, SignedUrl, StoredArtifact
from mediamesh.scheduler.store.health import INSERTS, StoreHealth
from mediamesh.scheduler.store.in_store_results import InStoreResults
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob
from mediamesh.scheduler.store.recent_artifacts import RecentArtifacts
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.submissions import Refused, Submissions
from mediamesh.scheduler.watching import JobWatchers
from mediamesh.scheduler.webhook_delivery import WebhookDeliverer

# Transitions logged at DEBUG only (see _on_transition).
_QUIET_STATES = frozenset({JobState.DISPATCHED, JobState.RUNNING})

log = logging.getLogger("mediamesh.scheduler")

# Longest a stopping scheduler waits for the store to take the last state changes.
FLUSH_ON_STOP_S = 5.0
# How often the queue and worker gauges are set. On their own timer, not the dispatch
# loop's: a loop that went quiet right after a burst of arrivals left them stale until the
# next heartbeat, and setting them on every pass under load only cost CPU.
GAUGE_INTERVAL_S = 0.2
# How often a store that refused new jobs is tried again (`JobStore.probe`) while readiness,
# NOT_SERVING for it, keeps Submits away.
STORE_PROBE_INTERVAL_S = 2.0
# Refusals the caller caused (a wrong model or key, too short a timeout) are INFO; those
# of load or of the store, which an operator may have to act on, are WARNING.
_CALLER_REFUSALS = frozenset(
    {"unknown_model", "idempotency_conflict", "timeout_too_short", INVALID_REQUEST}
)


class SchedulerRuntime:
    def __init__(
        self,
        core: SchedulingCore,
        store: JobStore,
        artifacts: ArtifactStore,
        link: WorkerLink,
        settings: SchedulerSettings,
        webhooks: WebhookSettings | None = None,
        *,
        recent_result_max_bytes: int = 0,
    ) -> None:
        """`artifacts` is the configured backend; small results are kept in `store` in
        front of it, and results up to `recent_result_max_bytes` in memory too, so that
        their watchers are sent them without reading them back."""
        self.core = core
        self.store = store
        # Whether the store takes writes: the scheduler's readiness follows it (main).
        self.store_health = StoreHealth()
        self.results: dict[str, StoredArtifact] = {}
        # When housekeeping next sweeps for results no job names (monotonic; at once).
        self._next_result_sweep = 0.0
        # The newest ended jobs stay in memory; older ones are read back from the store.
        self.ended = EndedJobs(core, store, self.results, settings.ended_jobs_in_memory)
        self.writer = StoreWriter(store, health=self.store_health, on_ends_stored=self.ended.stored)
        artifacts = RecentArtifacts(
            InStoreResults(artifacts, store, self.writer, settings.artifacts.in_store_limit),
            recent_result_max_bytes,
        )
        # Checkpoints stay on the shared local folder whatever the artifact backend.
        self.checkpoints = CheckpointFiles(settings.artifact_dir / "checkpoints")
        self.artifacts = artifacts
        self.link = link
        self.settings = settings
        self.hub = EventHub()
        self.watchers = JobWatchers(core, self.hub, self.results)
        # Per-model counts since this process started: the gateway serves them as Triton's
        # statistics extension, `mediamesh status` as its MODELS table.
        self.statistics = StatisticsLedger(time.time)
        self.webhooks = WebhookDeliverer(
            webhooks or WebhookSettings(), self.writer, artifacts, self.stored_artifact
        )
        # Set once `stop` begins: what stopping closes itself is no failure to record.
        self.stopping = False
        self._kick = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._housekeeping_task: asyncio.Task[None] | None = None
        self._gauges_task: asyncio.Task[None] | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._positions_task: asyncio.Task[None] | None = None
        self.batches = BatchRunner(
            core,
            self.writer,
            artifacts,
            link,
            settings,
            self.hub,
            self.results,
            self.apply,
            self.kick,
            self.statistics,
        )
        self.roster = WorkerRoster(link)
        self.result_usage = ResultUsage()
        self.submissions = Submissions(
            core,
            store,
            self.apply,
            self.store_health,
            self.result_usage,
            ended_outside_memory=lambda: self.ended.dropped_up_to is not None,
        )
        self.removal = JobRemoval(
            core,
            store,
            self.writer,
            artifacts,
            self.ended,
            self.results,
            self.result_usage,
            self.webhooks,
        )
        # One refusal line per queue and reason a minute: a full queue refuses thousands a
        # second. The lines between are counted, and the next says how many there were.
        self._refusal_log = LogThrottle()
        self._refusals_unlogged: dict[tuple[str, str], int] = {}
        # Input images kept with their jobs, and uploads.
        self.inputs = job_inputs(settings.artifact_dir, settings)

    # ---- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        cutoff = time.time() - self.settings.retention_s
        # Purge before loading, with the same cut-off: a row past its retention that stayed
        # in the store but not in memory would hold its idempotency key against new jobs.
        await asyncio.to_thread(self.inputs.uploads.load)
        await self.removal.purge(cutoff)
        self.result_usage.loaded(await self.store.result_bytes_by_tenant())
        restored = 0
        loaded = await self.store.load(cutoff, self.settings.ended_jobs_in_memory)
        for job, result in [*loaded.unfinished, *loaded.ended]:
            if result:
                self.results[job.job_id] = StoredArtifact(**result)
            was_unfinished = not job.state.terminal
            # Read before `restore`, which queues the job again and clears where it ran.
            previous = (job.state, job.worker_id or job.last_worker_id, job.batch_id or "")
            self.core.restore(job)
            if was_unfinished:
                self.checkpoints.seen(job)
                restored += 1
                self.writer.save(job)
                self._log_recovered(job, *previous)
                metrics.JOBS.labels(job.queue, "RECOVERED").inc()
        self.ended.loaded(loaded)
        self.writer.start()
        self.webhooks.start(await self.store.load_deliveries())
        if restored:
            log.info("recovered %d unfinished jobs from the store", restored)
        metrics.declare_series(list(self.settings.queues))
        for name, queue in self.settings.queues.items():
            metrics.QUEUE_SLA.labels(name).set(queue.sla_s)
            for priority in Priority:
                metrics.CLASS_SLA.labels(name, priority.name).set(queue.sla_for(priority.name))
        self._loop_task = asyncio.create_task(self._dispatch_loop(), name="dispatch-loop")
        self._housekeeping_task = asyncio.create_task(self._housekeeping(), name="housekeeping")
        self._gauges_task = asyncio.create_task(self._publish_gauges(), name="gauges")
        self._probe_task = asyncio.create_task(self._probe_failing_store(), name="store-probe")
        self._positions_task = asyncio.create_task(
            self.watchers.refresh_positions(), name="queue-positions"
        )

    @staticmethod
    def _log_recovered(job: Job, state: JobState, worker: str, batch: str) -> None:
        """The requeue line of a job taken back from the store: no Transition carries it,
        since `restore` queues the job without one, and the count alone named no job."""
        log_job(
            log,
            "job queued",
            job.trace_carrier,
            job_id=job.job_id,
            tenant=job.tenant,
            model=job.model,
            state=job.state.value,
            previous_state=state.value,
            attempt=job.attempts,
            worker=worker,
            batch=batch,
            reason="recovered after a scheduler restart",
        )

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        if self._loop_task is not None:
            # What happened before the stop lands first: cancelling the batches below gives
            # their jobs up in the core (a lost worker each), and the writer, which holds the
            # jobs themselves and not copies, would otherwise store them so.
            await self.writer.flush(FLUSH_ON_STOP_S)
        # From here on nothing is applied (see `apply`): the scheduler's own stopping is no
        # loss of a worker and no end of a job. Their stored states stand, and the next
        # start queues the unfinished jobs again, as after a crash, spending no attempt.
        self.stopping = True
        own = (
            self._loop_task,
            self._housekeeping_task,
            self._gauges_task,
            self._probe_task,
            self._positions_task,
        )
        for task in (*own, *self._tasks):
            if task is not None:
                task.cancel()
        for task in (*own, *self._tasks):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.link.close()
        await self.webhooks.close()
        await self.writer.close(max(FLUSH_ON_STOP_S - (loop.time() - began), 0.1))
        await self.store.close()
        await self.artifacts.close()

    def kick(self) -> None:
        self._kick.set()

    async def _dispatch_loop(self) -> None:
        tick = self.settings.heartbeat_interval_s
        while True:
            try:
                self.core.expire_due()
                self.core.check_liveness()
                self.core.schedule()
                self.apply(self.core.take_effects())
                self.roster.release_departed(self.core.units)
            except Exception:
                log.exception("dispatch loop iteration failed; continuing")
            wake = self.core.next_wakeup()
            timeout = tick if wake is None else min(max(wake - time.time(), 0.0), tick)
            await wait_event(self._kick, timeout)
            self._kick.clear()

    async def _publish_gauges(self) -> None:
        queues = list(self.settings.queues)
        while True:
            try:
                metrics.publish_gauges(self.core, queues)
                metrics.ENDED_JOBS_IN_MEMORY.set(self.ended.held)
            except Exception:
                log.exception("setting the gauges failed; trying again")
            await asyncio.sleep(GAUGE_INTERVAL_S)

    async def _probe_failing_store(self) -> None:
        """While new jobs' inserts fail, write a probe row now and then: its success is the
        store taking writes again, which no Submit would find out while readiness keeps
        them away. State changes need no probe: the writer retries them itself."""
        while True:
            await asyncio.sleep(STORE_PROBE_INTERVAL_S)
            if not self.store_health.is_failing(INSERTS):
                continue
            try:
                await self.store.probe()
            except Exception as exc:
                log.debug("the job store still takes no writes: %s", exc)
            else:
                self.store_health.succeeded(INSERTS)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(min(60.0, self.settings.retention_s / 4))
            cutoff = time.time() - self.settings.retention_s
            try:
                await self.removal.purge(cutoff)
            except Exception:
                log.exception("purging jobs past their retention failed; trying again later")
            if time.monotonic() >= self._next_result_sweep:
                self._next_result_sweep = time.monotonic() + RESULT_SWEEP_INTERVAL_S
                await self.removal.sweep_orphans(cutoff - ORPHAN_RESULT_MARGIN_S)
            live = {j.checkpoint for j in self.core.jobs.values() if j.checkpoint}
            self.checkpoints.sweep(live, cutoff)
            kept = [j.params for j in self.core.jobs.values()]
            await asyncio.to_thread(self.inputs.tidy, kept, cutoff)

    # ---- effects -------------------------------------------------------------------------

    def apply(self, effects: list[Effect]) -> None:
        if self.stopping:
            return
        for effect in effects:
            if isinstance(effect, Transition):
                self._on_transition(effect)
            elif isinstance(effect, Dispatch):
                self._spawn(self.batches.run(effect))
            elif isinstance(effect, CancelOnWorker):
                self._spawn(self.link.cancel(effect.address, list(effect.job_ids)))
            elif isinstance(effect, Notice):
                self.hub.publish(
                    notice_event(effect.job, effect.kind, effect.message, effect.worker_id)
                )
                if effect.kind == "spot_fallback":
                    metrics.SPOT_FALLBACKS.labels(effect.job.queue).inc()
            elif isinstance(effect, Progressed):
                self.hub.publish(
                    WatchEvent(
                        effect.job.job_id,
                        effect.job.state,
                        "progress",
                        step=effect.step,
                        total_steps=effect.total_steps,
                        attempt=effect.job.attempts,
                        preview=effect.preview,
                    )
                )
                self.webhooks.progressed(effect.job, effect.step, effect.total_steps)
        if effects:
            self.kick()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_transition(self, effect: Transition) -> None:
        job, state = effect.job, effect.state
        artifact = self.results.get(job.job_id)
        self.writer.save(
            job,
            artifact.__dict__ if artifact and state.terminal else None,
            may_wait=state.in_flight,
        )
        if not state.terminal:
            self.checkpoints.seen(job)
        log_job(
            log,
            f"job {state.value.lower()}",
            job.trace_carrier,
            # Acceptance, requeues and the end at INFO; the end names the worker and batch.
            # The steps between are DEBUG: at a thousand jobs a second their lines cost the
            # scheduler more than any other part of a job's bookkeeping.
            logging.DEBUG if state in _QUIET_STATES else logging.INFO,
            job_id=job.job_id,
            tenant=job.tenant,
            model=job.model,
            state=state.value,
            worker=effect.worker_id,
            batch=effect.batch_id,
            reason=effect.reason,
        )
        if state is JobState.QUEUED:
            if job.attempts == 0:
                metrics.JOBS.labels(job.queue, "ACCEPTED").inc()
            self.watchers.publish_queued(job)
        elif state is JobState.DISPATCHED:
            self.hub.publish(
                WatchEvent(
                    job.job_id,
                    state,
                    "notice",
                    notice="dispatched",
                    message=f"dispatched to {job.worker_id} (attempt {job.attempts})",
                    worker_id=job.worker_id or "",
                    attempt=job.attempts,
                )
            )
        elif state.terminal:
            if not effect.worker_id:
                tracing.ended_in_queue(job, state, effect.reason)
            metrics.JOBS.labels(job.queue, state.value).inc()
            latency = max((job.finished_at or time.time()) - job.created_at, 0.0)
            metrics.JOB_LATENCY.labels(job.queue, job.priority.name).observe(latency)
            self.statistics.job_ended(job.tenant, job.model, state is JobState.SUCCEEDED, latency)
            if stale := self.checkpoints.files_of_ended(job):
                self._spawn(self.checkpoints.delete(stale))
            if artifact is not None:
                self.result_usage.added(job.tenant, artifact.size_bytes)
            self.hub.publish(self.watchers.final_event(job))
            self.webhooks.job_ended(job, artifact)

    # ---- calls from the API --------------------------------------------------------------

    async def submit(self, new: NewJob, result_quota_bytes: int = 0) -> tuple[Job, bool]:
        """Accept a job, durable before it queues (see `Submissions`): returns it and whether
        it is an earlier one with the same idempotency key. `result_quota_bytes`: the
        tenant's quota of stored results (0: none; see result_usage.py)."""
        try:
            return await self.submissions.submit(new, result_quota_bytes)
        except MeshError as exc:
            reason = exc.reason if isinstance(exc, Refused) else "other"
            self.refused(new.model, new.tenant, new.trace_carrier, exc, reason)
            raise

    def refused(
        self,
        model: str,
        tenant: str,
        trace_carrier: Mapping[str, str],
        exc: MeshError,
        reason: str,
    ) -> None:
        """Count and (a line per queue and reason a minute) log a job refused at Submit,
        by admission or (the servicer's call) by the request checks before it."""
        spec = self.core.specs.get(model)
        queue = spec.modality if spec is not None else metrics.UNKNOWN_QUEUE
        metrics.JOBS_REFUSED.labels(queue, reason).inc()
        kind = (queue, reason)
        if not self._refusal_log.due(f"{queue}/{reason}"):
            self._refusals_unlogged[kind] = self._refusals_unlogged.get(kind, 0) + 1
            return
        quiet = reason in _CALLER_REFUSALS
        log_job(
            log,
            "job refused",
            trace_carrier,
            logging.INFO if quiet else logging.WARNING,
            queue=queue,
            reason=reason,
            code=exc.code.value,
            tenant=tenant,
            model=model,
            error=exc.message,
            # Refused alike since the last line, not logged.
            unlogged=self._refusals_unlogged.pop(kind, 0),
        )

    async def owned_job(self, job_id: str, tenant: str, *, admin: bool = False) -> JobRecord:
        """The job, from memory or the store, if it exists and belongs to the tenant (any
        tenant, for a caller with the admin scope); otherwise NOT_FOUND, identically. No
        tenant name matches every job."""
        record = await self.ended.find(job_id)
        if record is None or (record.job.tenant != tenant and not admin):
            raise NotFound(f"job_id: no job {job_id!r}")
        return record

    async def stored_artifact(self, job_id: str) -> StoredArtifact | None:
        """The job's stored result, from memory or the store."""
        record = await self.ended.find(job_id)
        return record.artifact if record is not None else None

    async def list_jobs(
        self, tenant: str, query: JobQuery, *, admin: bool = False
    ) -> tuple[list[JobRecord], bool]:
        """A page of the tenant's jobs (every tenant's for a caller with the admin scope),
        and whether more follow."""
        return await self.ended.page(tenant, query, admin=admin)

    async def cancel(self, job_id: str, tenant: str, *, admin: bool = False) -> JobRecord:
        """Stop the job; one that has ended is answered as it stands."""
        record = await self.owned_job(job_id, tenant, admin=admin)
        if record.job.state.terminal:
            return record
        job = self.core.cancel(job_id)
        self.apply(self.core.take_effects())
        assert job is not None
        return JobRecord(job, self.results.get(job_id))

    async def delete(self, job_id: str, tenant: str, *, admin: bool = False) -> PurgedJob:
        """Delete an ended job before its retention: its record, its result (every stored
        copy) and its pending webhook deliveries. FAILED_PRECONDITION for a job that has
        not ended, whose worker may still write a result."""
        job = (await self.owned_job(job_id, tenant, admin=admin)).job
        if not job.state.terminal:
            raise FailedPrecondition(
                f"job_id: job {job_id!r} is {job.state.value} and only an ended job can be "
                "deleted; cancel it first"
            )
        return await self.removal.delete(job)

    async def watch(
        self,
        job_id: str,
        tenant: str,
        *,
        admin: bool = False,
        final_only: bool = False,
        snapshot_first: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """The job's current state, then its events to its end (see `JobWatchers.follow`)."""
        job, artifact = await self.owned_job(job_id, tenant, admin=admin)
        following = self.watchers.follow(
            job, artifact, final_only=final_only, snapshot_first=snapshot_first
        )
        # Closed with this one: a watcher that goes away unsubscribes at once, not at GC.
        async with contextlib.aclosing(following) as events:
            async for event in events:
                yield event

    async def artifact_of(self, job_id: str, tenant: str, *, admin: bool = False) -> StoredArtifact:
        """The job's stored result; FAILED_PRECONDITION without one, NOT_FOUND once gone."""
        job, artifact = await self.owned_job(job_id, tenant, admin=admin)
        if job.state is not JobState.SUCCEEDED or artifact is None:
            raise FailedPrecondition(
                f"job_id: job {job_id!r} has no result (state {job.state.value})"
            )
        if not await self.artifacts.exists(artifact.path):
            raise NotFound(f"job_id: the artifact of job {job_id!r} is gone (retention)")
        return artifact

    async def result_url(self, record: JobRecord, inline_limit: int) -> SignedUrl | None:
        """A presigned URL of the job's result, when the request set result_as_url or the
        result exceeds `inline_limit` and the artifact store can sign one (the local
        backend cannot: those results are fetched with Download, or over HTTP from the
        gateway's result endpoint)."""
        job, artifact = record
        if job.state is not JobState.SUCCEEDED or artifact is None:
            return None
        if not job.delivery.result_as_url and artifact.size_bytes <= inline_limit:
            return None
        return await self.artifacts.signed_url(artifact.path)

    # ---- workers -------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        self.batches.link.reset(info.address)
        self.core.register_worker(info)
        self.roster.release_departed(self.core.units)
        self.roster.registered(info)
        log.info(
            "worker %s registered: pool=%s models=%s address=%s",
            info.worker_id,
            info.pool,
            ",".join(sorted(info.models)),
            info.address,
        )
        self.apply(self.core.take_effects())
        self.kick()

    def worker_heartbeat(
        self,
        worker_id: str,
        draining: bool,
        adapters: Mapping[str, Mapping[str, float]] | None = None,
        residency: Mapping[str, tuple[bool, float]] | None = None,
    ) -> None:
        """A worker is alive; `adapters`: its loaded LoRA adapters per model, `residency`:
        per hosted model (loaded now, last load seconds), each when reported."""
        self.core.heartbeat(worker_id, draining)
        if adapters is not None:
            self.core.adapters_loaded(worker_id, adapters)
        if residency is not None:
            self.core.models_resident(worker_id, residency)

    def registered_as(self, info: WorkerInfo) -> bool:
        """Whether `info` is still the worker's registration (not dropped, not replaced)."""
        unit = self.core.units.get(info.worker_id)
        return unit is not None and unit.info is info

    def worker_gone(self, info: WorkerInfo, reason: str) -> None:
        # A session that ends after its worker registered again must not take the new one.
        if not self.registered_as(info) or self.stopping:
            return
        log.warning("worker %s lost: %s", info.worker_id, reason)
        self.core.worker_lost(info.worker_id, reason)
        self.apply(self.core.take_effects())
        self.roster.release_departed(self.core.units)

    async def settle_batches(
        self, info: WorkerInfo, batch_ids: list[str], timeout_s: float
    ) -> list[str]:
        """Wait (at most `timeout_s`) until every event of the worker's ended batches is
        applied; returns the batches that are. The worker sends no heartbeats while it waits
        for this answer, so it is kept alive here: it is waiting on us, not silent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := deadline - loop.time()) > 0 and self.batches.unapplied(batch_ids):
            unit = self.core.units.get(info.worker_id)
            if unit is not None and unit.info is info:
                self.core.heartbeat(info.worker_id, unit.draining)
            await self.batches.wait_applied(
                batch_ids, min(left, self.settings.heartbeat_interval_s)
            )
        pending = set(self.batches.unapplied(batch_ids))
        return [b for b in batch_ids if b not in pending]
