"""Removing ended jobs whole: at the end of their retention, on DeleteJob, and the results
that a crash left without a job.

A job lives in several places once it has ended: its row in the store, its result (a file,
an object, or bytes kept in the store, plus any copy made for a presigned URL), its entry in
memory, its tenant's result bytes and its pending webhook deliveries. Retention and
DeleteJob remove the same things in the same order, so both go through `_forget`: the row
first, so that a crash midway leaves a result no job names (which `sweep_orphans` finds)
rather than a job whose result is gone.
"""

from __future__ import annotations

import asyncio
import logging

from mediamesh.common.errors import NotFound
from mediamesh.common.telemetry import log_job
from mediamesh.scheduler import metrics
from mediamesh.scheduler.core.interface import SchedulingCore
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.ended_jobs import EndedJobs
from mediamesh.scheduler.result_usage import ResultUsage
from mediamesh.scheduler.store.artifacts import ArtifactStore, StoredArtifact
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_delivery import WebhookDeliverer

log = logging.getLogger("mediamesh.scheduler")

# How much older than the retention a result must be before the sweep takes it: its job
# ended after the result was written, and is purged at the retention counted from its end.
ORPHAN_RESULT_MARGIN_S = 3600.0
# Between sweeps: each lists every result (a LIST request per thousand objects in a bucket),
# and what it finds is rare.
RESULT_SWEEP_INTERVAL_S = 3600.0


class JobRemoval:
    def __init__(
        self,
        core: SchedulingCore,
        store: JobStore,
        writer: StoreWriter,
        artifacts: ArtifactStore,
        ended: EndedJobs,
        results: dict[str, StoredArtifact],
        result_usage: ResultUsage,
        webhooks: WebhookDeliverer,
    ) -> None:
        self.core = core
        self.store = store
        self.writer = writer
        self.artifacts = artifacts
        self.ended = ended
        self.results = results
        self.result_usage = result_usage
        self.webhooks = webhooks
        # Jobs a DeleteJob is deleting: a second DeleteJob of one answers NOT_FOUND.
        self._deleting: dict[str, asyncio.Future[PurgedJob | None]] = {}

    async def purge(self, cutoff: float) -> None:
        """Remove the jobs that ended before `cutoff`."""
        for gone in await self.store.purge(cutoff):
            # A delivery still retrying would write its row back for a job that is gone.
            self.webhooks.abandon(gone.job_id)
            await self._forget(gone)

    async def delete(self, job: Job) -> PurgedJob:
        """Remove an ended job before its retention. NOT_FOUND when another DeleteJob, or
        its retention, got there first."""
        job_id = job.job_id
        if job_id in self._deleting:
            raise NotFound(f"job_id: no job {job_id!r}")
        deleting = asyncio.ensure_future(self._delete(job))
        self._deleting[job_id] = deleting
        deleting.add_done_callback(lambda _: self._deleting.pop(job_id, None))
        # Shielded: once the row goes, the result and the memory of the job must go too,
        # even if the caller gives up meanwhile.
        deleted = await asyncio.shield(deleting)
        if deleted is None:
            raise NotFound(f"job_id: no job {job_id!r}")
        return deleted

    async def _delete(self, job: Job) -> PurgedJob | None:
        # Before the row goes: a delivery still retrying would write its row back.
        self.webhooks.abandon(job.job_id)
        # Through the writer, after every write of the job it has queued: an upsert of the
        # job's end landing after a delete sent straight to the store would bring it back.
        deleted = await self.writer.delete(job.job_id)
        if deleted is None:
            return None
        await self._forget(deleted)
        metrics.JOBS_DELETED.labels(job.queue).inc()
        log_job(log, "job deleted", job.trace_carrier, job_id=job.job_id, state=deleted.state)
        return deleted

    async def _forget(self, gone: PurgedJob) -> None:
        """What is left of a job whose row the store has deleted (its webhook deliveries
        stopped by the caller)."""
        self.ended.purged(gone.job_id, gone.state)
        self.result_usage.removed(gone.tenant, gone.result_bytes)
        artifact = self.results.pop(gone.job_id, None)
        self.core.forget(gone.job_id)
        await self.artifacts.delete(artifact.path if artifact else gone.artifact_path)
        for copy in gone.copies:
            await self.artifacts.delete(copy)

    async def sweep_orphans(self, older_than: float) -> None:
        """Remove results that no job names any more, those a crash between a row's
        deletion and its result's left behind, and which no purge would then find."""
        try:
            swept = await self.artifacts.sweep(older_than)
        except Exception:
            log.exception("sweeping results no job names failed; trying again later")
            return
        if swept:
            log.warning("removed %d stored results that no job named any more", swept)
