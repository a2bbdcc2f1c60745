"""What workers report about running jobs, workers coming and going, cancels and deadlines.

Every report is checked against the job's current batch, so a late or duplicate report from
a worker that was already given up on changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from mediamesh.common.errors import StatusCode
from mediamesh.common.input_refs import without_inline_bytes
from mediamesh.common.work import Preview
from mediamesh.scheduler.core.backlog import Backlog
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.effects import (
    CancelOnWorker,
    Notice,
    Progressed,
)
from mediamesh.scheduler.core.inflight import InFlight
from mediamesh.scheduler.core.job_table import JobTable
from mediamesh.scheduler.core.jobs import (
    Job,
    JobState,
)
from mediamesh.scheduler.core.ledger import CostLedger
from mediamesh.scheduler.core.outbox import Outbox
from mediamesh.scheduler.core.units import WorkerInfo


class JobLifecycle:
    """Progress, results, preemption, batch ends, lost workers, cancels and expiry.

    Owns the counts of how jobs ended and were preempted, and the ledger of device-seconds
    that progress reports add up.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        max_worker_losses: int,
        cost: CostModel,
        ledger: CostLedger,
        table: JobTable,
        backlog: Backlog,
        inflight: InFlight,
        outbox: Outbox,
    ) -> None:
        self._clock = clock
        self._max_worker_losses = max_worker_losses
        self._cost = cost
        self.ledger = ledger
        self._table = table
        self._backlog = backlog
        self._inflight = inflight
        self._outbox = outbox
        # Read-only outside this class.
        self.preemptions: dict[str, int] = defaultdict(int)
        self.ended: dict[tuple[str, JobState], int] = defaultdict(int)

    # ---- reports from workers ------------------------------------------------------------

    def _in_batch(self, job_id: str, batch_id: str) -> Job | None:
        """The job if it is still in flight in this batch; stale reports are ignored."""
        job = self._table.jobs.get(job_id)
        if job is None or not job.state.in_flight or job.batch_id != batch_id:
            return None
        return job

    def job_progress(
        self,
        job_id: str,
        batch_id: str,
        step: int,
        total_steps: int,
        step_seconds: float = 0.0,
        preview: Preview | None = None,
    ) -> None:
        """A job of a batch finished a step; its time calibrates the cost model."""
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return
        if job.state is JobState.DISPATCHED:
            self._outbox.transition(job, JobState.RUNNING)
        job.step, job.total_steps = step, total_steps
        if step >= total_steps:
            self._inflight.at_last_step(batch_id, job_id, self._clock())
        batch = self._inflight.batch(batch_id)
        if step_seconds > 0 and batch is not None:
            self._cost.observe_step(job.model, job.params, batch.size, step_seconds)
            pool = self._inflight.pool_of(batch.worker_id)
            if pool is None:
                pool = "unknown"
            self.ledger.record(pool, job.model, job.tenant, step_seconds / batch.size)
        self._outbox.emit(Progressed(job, step, total_steps, preview))

    def job_succeeded(self, job_id: str, batch_id: str) -> Job | None:
        """A job of a batch produced its result; None when the report is stale."""
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return None
        self._inflight.result_arrived(batch_id, self._clock())
        self._inflight.release(job)
        self._finish(job, JobState.SUCCEEDED)
        return job

    def job_failed(self, job_id: str, batch_id: str, code: str, message: str) -> None:
        """A job of a batch failed (or was cancelled, code CANCELLED) on its worker."""
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return
        self._inflight.result_arrived(batch_id, self._clock())
        self._inflight.release(job)
        job.error_code, job.error_message = code, message
        state = JobState.CANCELLED if code == StatusCode.CANCELLED else JobState.FAILED
        self._finish(job, state, message)

    def job_preempted(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> bool:
        """A job stopped at `step` and saved `checkpoint`; it goes back first in line.

        Returns whether it was preempted, that is stopped after running: a draining worker
        hands back the jobs it never started with the checkpoint they came with (or none),
        which costs them nothing, and their step stays where that checkpoint left it."""
        job = self._in_batch(job_id, batch_id)
        if job is None:
            return False
        self._inflight.release(job)
        started_at = job.checkpoint_step if job.checkpoint else 0
        ran_to = job.step
        if (checkpoint or None) != job.checkpoint:
            job.checkpoint = checkpoint or None
            job.checkpoint_step = step
            message = f"preempted at step {step}; checkpoint saved"
            if not checkpoint:
                message = f"preempted at step {ran_to}; no checkpoint was saved: it starts over"
        elif ran_to > started_at:
            # It ran, but the worker could not write a newer checkpoint (a full disk): the
            # steps past the last one are lost, which is a preemption all the same.
            resumes = f"resumes from step {started_at}" if job.checkpoint else "starts over"
            message = f"preempted at step {ran_to}; no newer checkpoint was saved: it {resumes}"
        else:
            self._requeue_front(job, "requeued", "handed back before it ran: its worker drains")
            return False
        self.preemptions[self._inflight.pool_of(job.worker_id) or ""] += 1
        self._requeue_front(job, "preempted", message)
        return True

    def job_checkpointed(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> None:
        """A running job saved a checkpoint it can resume from."""
        job = self._in_batch(job_id, batch_id)
        if job is not None:
            job.checkpoint, job.checkpoint_step = checkpoint, step

    def batch_size(self, batch_id: str) -> int:
        """Jobs the batch was dispatched with (1 once it closed or when unknown)."""
        batch = self._inflight.batch(batch_id)
        return batch.size if batch is not None else 1

    def batch_ended(self, batch_id: str) -> None:
        """The worker's stream for this batch closed; anything unreported goes back in line."""
        batch = self._inflight.batch(batch_id)
        if batch is None:
            return
        if batch.job_ids:
            self._abandon_batch(batch_id, "batch ended without a result")
            return
        self._inflight.batch_done(batch, self._clock())

    def batch_undelivered(self, batch_id: str, reason: str) -> None:
        """The worker never took the batch. Its jobs go back first in line without counting
        a lost worker: they did not run, so they cannot be what is killing workers, and a
        worker that restarted behind a stale connection must not use up their retries in
        milliseconds. The unit goes until its worker registers again, so the next pass does
        not pick it straight back."""
        batch = self._inflight.batch(batch_id)
        if batch is None:
            return
        self._abandon_batch(batch_id, reason, count_loss=False)
        self.worker_lost(batch.worker_id, reason)

    # ---- workers -------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        """A worker joined; one registering again is first given up on as it was."""
        if info.worker_id in self._inflight.units:
            self.worker_lost(info.worker_id, "worker registered again")
        self._inflight.add_unit(info, self._clock())

    def check_liveness(self, heartbeat_timeout_s: float) -> list[str]:
        """Give up on workers not heard from for longer than the timeout; returns their ids."""
        dead = self._inflight.silent(self._clock(), heartbeat_timeout_s)
        for worker_id in dead:
            self.worker_lost(worker_id, "heartbeats stopped")
        return dead

    def worker_lost(self, worker_id: str, reason: str) -> None:
        """A worker is gone; its batches' jobs go back first in line, or fail after too many
        lost workers."""
        unit = self._inflight.remove_unit(worker_id)
        if unit is None:
            return
        for batch_id in list(unit.batches):
            self._abandon_batch(batch_id, f"worker {worker_id} lost: {reason}")

    def _abandon_batch(self, batch_id: str, reason: str, count_loss: bool = True) -> None:
        inflight = self._inflight
        batch = inflight.pop_batch(batch_id)
        if batch is None:
            return
        jobs = self._table.jobs
        for job_id in list(batch.job_ids):
            job = jobs[job_id]
            inflight.release(job)
            job.worker_losses += count_loss
            if job.worker_losses >= self._max_worker_losses:
                job.error_code, job.error_message = (
                    StatusCode.UNAVAILABLE,
                    f"{reason}; gave up after {job.worker_losses} lost workers",
                )
                self._finish(job, JobState.FAILED, job.error_message)
            else:
                self._requeue_front(job, "requeued", reason)
        inflight.close_batch(batch)

    def _requeue_front(self, job: Job, kind: str, message: str) -> None:
        job.at_front = True
        job.enqueued_at = self._clock()
        job.start_over()
        self._outbox.emit(Notice(job, kind, message, worker_id=job.worker_id))
        # Recorded while the job still names the worker and batch it leaves: its log line
        # says where it was lost, not where it goes next.
        self._outbox.transition(job, JobState.QUEUED, message)
        job.worker_id = job.batch_id = None
        self._backlog.add(job)
        self._inflight.watch_limit(job)

    def _finish(self, job: Job, state: JobState, reason: str = "") -> None:
        job.finished_at = self._clock()
        # Nothing reads an ended job's inputs again, and the newest ended jobs stay in
        # memory (ended_jobs.py); holding their inline images would multiply that memory.
        job.params = without_inline_bytes(job.params)
        self.ended[(job.queue, state)] += 1
        self._outbox.transition(job, state, reason)

    # ---- cancel and deadlines ------------------------------------------------------------

    def cancel(self, job_id: str) -> Job | None:
        """Stop a job wherever it is; None when unknown, the job as it stands otherwise."""
        job = self._table.jobs.get(job_id)
        if job is None or job.state.terminal:
            return job
        self._stop(job, JobState.CANCELLED, StatusCode.CANCELLED, "cancelled by request")
        return job

    def expire_due(self) -> list[Job]:
        """End every job whose deadline has passed; returns them."""
        expired = []
        for job in self._table.due(self._clock()):
            self._stop(job, JobState.EXPIRED, StatusCode.DEADLINE_EXCEEDED, "deadline passed")
            expired.append(job)
        return expired

    def _stop(self, job: Job, state: JobState, code: str, message: str) -> None:
        worker = self._inflight.units.get(job.worker_id or "")
        if job.state is JobState.QUEUED:
            self._backlog.remove(job)
        elif job.state.in_flight:
            self._inflight.release(job)
            if worker is not None:
                self._outbox.emit(
                    CancelOnWorker(worker.worker_id, worker.info.address, (job.job_id,))
                )
        job.error_code, job.error_message = code, message
        self._finish(job, state, message)
