"""What workers report about running jobs, and cancels and deadlines.

A mixin of `SchedulerCore`; every report is checked against the job's current batch, so a
late or duplicate report from a worker that was already given up on changes nothing.
"""

from __future__ import annotations

import heapq

from mediamesh.scheduler.core.effects import (
    CancelOnWorker,
    Notice,
    Progressed,
)
from mediamesh.scheduler.core.jobs import (
    Job,
    JobState,
)


class JobLifecycle:
    """Progress, results, preemption, batch ends, cancels and expiry."""

    # ---- reports from workers ------------------------------------------------------------

    def _in_batch(self, job_id: str, batch_id: str) -> Job | None:
        """The job if it is still in flight in this batch; stale reports are ignored."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.in_flight or job.batch_id != batch_id:
            return None
        return job

    def job_progress(
        self, job_id: str, batch_id: str, step: int, total_steps: int, step_seconds: float = 0.0
    ) -> None:
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return
        if job.state is JobState.DISPATCHED:
            self._transition(job, JobState.RUNNING)
        job.step, job.total_steps = step, total_steps
        batch = self._batches.get(batch_id)
        if step_seconds > 0 and batch is not None:
            self.cost.observe_step(job.model, job.params, batch.size, step_seconds)
            unit = self.units.get(batch.worker_id)
            pool = unit.pool if unit is not None else "unknown"
            self.ledger.record(pool, job.model, job.tenant, step_seconds / batch.size)
        self._effects.append(Progressed(job, step, total_steps))

    def job_succeeded(self, job_id: str, batch_id: str) -> Job | None:
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return None
        self._release(job)
        self._finish(job, JobState.SUCCEEDED)
        return job

    def job_failed(self, job_id: str, batch_id: str, code: str, message: str) -> None:
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return
        self._release(job)
        job.error_code, job.error_message = code, message
        state = JobState.CANCELLED if code == "CANCELLED" else JobState.FAILED
        self._finish(job, state, message)

    def job_preempted(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> None:
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return
        self._release(job)
        job.checkpoint = checkpoint or None
        job.step = step
        self.preemptions[self.units[job.worker_id].pool if job.worker_id in self.units else ""] += 1
        self._requeue_front(job, "preempted", f"preempted at step {step}; checkpoint saved")

    def job_checkpointed(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> None:
        job = self._in_batch(job_id, batch_id)
        if job is not None:
            job.checkpoint = checkpoint

    def batch_size(self, batch_id: str) -> int:
        batch = self._batches.get(batch_id)
        return batch.size if batch is not None else 1

    def batch_ended(self, batch_id: str) -> None:
        """The worker's stream for this batch closed; anything unreported goes back in line."""
        batch = self._batches.get(batch_id)
        if batch is None:
            return
        if batch.job_ids:
            self._abandon_batch(batch_id, "batch ended without a result")
            return
        self._batches.pop(batch_id)
        unit = self.units.get(batch.worker_id)
        if unit is not None:
            unit.batches.discard(batch_id)
            unit.version += 1
            self._free.offer(unit)

    def batch_undelivered(self, batch_id: str, reason: str) -> None:
        """The worker never took the batch. Its jobs go back first in line without counting
        a lost worker: they did not run, so they cannot be what is killing workers, and a
        worker that restarted behind a stale connection must not use up their retries in
        milliseconds. The unit goes until its worker registers again, so the next pass does
        not pick it straight back."""
        batch = self._batches.get(batch_id)
        if batch is None:
            return
        self._abandon_batch(batch_id, reason, count_loss=False)
        self.worker_lost(batch.worker_id, reason)

    def _release(self, job: Job) -> None:
        """Take an in-flight job off its unit's load and its batch's open set."""
        charge, pool = self._charged.pop(job.job_id, (0.0, ""))
        if pool:
            key = (job.queue, pool)
            self.pool_running_s[key] = max(self.pool_running_s[key] - charge, 0.0)
        unit = self.units.get(job.worker_id or "")
        if unit is not None:
            unit.load_s = max(unit.load_s - charge, 0.0)
            unit.version += 1
            self._free.offer(unit)
        batch = self._batches.get(job.batch_id or "")
        if batch is not None:
            batch.job_ids.discard(job.job_id)
        self.running[job.queue] -= 1
        self._running_by_tenant[job.tenant] -= 1
        self._limited_count_changed(job.tenant, self._running_by_tenant[job.tenant] + 1)

    def _requeue_front(self, job: Job, kind: str, message: str) -> None:
        job.at_front = True
        job.enqueued_at = self.clock()
        job.worker_id = job.batch_id = None
        self._enqueue(job)
        self._effects.append(Notice(job, kind, message))
        self._transition(job, JobState.QUEUED, message)

    def _finish(self, job: Job, state: JobState, reason: str = "") -> None:
        self._transition(job, state, reason)

    # ---- cancel and deadlines ------------------------------------------------------------

    def cancel(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is None or job.state.terminal:
            return job
        self._stop(job, JobState.CANCELLED, "CANCELLED", "cancelled by request")
        return job

    def expire_due(self) -> list[Job]:
        now = self.clock()
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            item = heapq.heappop(self._deadlines)
            if self._deadline_stale(item):
                continue
            job = self.jobs[item[1]]
            self._stop(job, JobState.EXPIRED, "DEADLINE_EXCEEDED", "deadline passed")
            expired.append(job)
        return expired

    def _stop(self, job: Job, state: JobState, code: str, message: str) -> None:
        worker = self.units.get(job.worker_id or "")
        if job.state is JobState.QUEUED:
            self._dequeue(job)
        elif job.state.in_flight:
            self._release(job)
            if worker is not None:
                self._effects.append(
                    CancelOnWorker(worker.worker_id, worker.info.address, (job.job_id,))
                )
        job.error_code, job.error_message = code, message
        self._finish(job, state, message)
