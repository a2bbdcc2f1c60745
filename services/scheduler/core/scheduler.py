"""The scheduling policy: queues, batching, routing and job lifecycle, with a clock passed in.

Plain Python with no gRPC, asyncio or torch, so one owner task drives it in the service
and the simulator drives the very same object with a virtual clock. Every call returns
immediately; what must happen outside (store writes, dispatches, cancels, events) is
queued as effects for the owner to take with `take_effects()`.

`SchedulerCore` composes parts that each own their state and talk through narrow methods:

- `JobTable` (job_table.py): the jobs in memory, idempotency keys and deadlines;
- `Backlog` (backlog.py): the queued jobs and the counters of queued work;
- `InFlight` (inflight.py): the units, their open batches and the counters of running work;
- `Admission` (admission.py): whether a job may queue;
- `Dispatcher` (dispatch.py): forming batches and routing them;
- `JobLifecycle` (lifecycle.py): reports from workers, lost workers, cancels and expiry;
- `Outbox` (outbox.py): the effects for the owner, in order.

Owners depend on the `SchedulingCore` protocol (interface.py), which this class implements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import Preview
from mediamesh.scheduler.core.admission import Admission
from mediamesh.scheduler.core.affinity import AdapterAffinity
from mediamesh.scheduler.core.backlog import Backlog
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.dispatch import Dispatcher
from mediamesh.scheduler.core.effects import Dispatch, Effect
from mediamesh.scheduler.core.inflight import InFlight
from mediamesh.scheduler.core.interface import Accepted, NewJob, Rejection, SchedulingCore
from mediamesh.scheduler.core.job_table import JobTable
from mediamesh.scheduler.core.jobs import Job, Priority
from mediamesh.scheduler.core.ledger import CostLedger
from mediamesh.scheduler.core.lifecycle import JobLifecycle
from mediamesh.scheduler.core.outbox import Outbox
from mediamesh.scheduler.core.pausing import Pauser
from mediamesh.scheduler.core.policy import CorePolicy, QueuePolicy
from mediamesh.scheduler.core.residency import ModelResidency
from mediamesh.scheduler.core.units import WorkerInfo, pool_views

__all__ = [
    "Accepted",
    "CorePolicy",
    "NewJob",
    "QueuePolicy",
    "Rejection",
    "SchedulerCore",
    "SchedulingCore",
]


class SchedulerCore:
    """The scheduler's policy, built from its parts; implements `SchedulingCore`.

    The public counters are the parts' own (read-only here), so reading them costs nothing.
    """

    def __init__(
        self,
        specs: list[ModelSpec],
        policy: CorePolicy,
        clock: Callable[[], float],
        new_id: Callable[[], str],
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.policy = policy
        self.clock = clock
        self.cost = CostModel(specs)
        self.ledger = CostLedger(dict(policy.prices_per_device_hour))
        views = pool_views(policy.placements)
        outbox = self._outbox = Outbox()
        table = self._table = JobTable()
        backlog = self._backlog = Backlog(
            specs, policy.placements, policy.aging_s_per_class, set(views.values())
        )
        inflight = self._inflight = InFlight(
            max((s.batching.max_batch for s in specs), default=1),
            policy.dispatching.ahead,
            policy.dispatching.ahead_lead_s,
            policy.dispatching.tail_end,
        )
        self._admission = Admission(
            self.specs, policy, self.cost, clock, new_id, table, backlog, inflight, outbox
        )
        self.affinity = AdapterAffinity(policy.adapter_affinity)
        self.residency = ModelResidency(policy.residency)
        dispatcher = self._dispatcher = Dispatcher(
            self.specs,
            policy.placements,
            views,
            clock,
            table,
            backlog,
            inflight,
            outbox,
            self.affinity,
        )
        lifecycle = self._lifecycle = JobLifecycle(
            clock,
            policy.max_worker_losses,
            self.cost,
            self.ledger,
            table,
            backlog,
            inflight,
            outbox,
        )
        pauser = Pauser(
            self.specs, policy.pausing, policy.queues, table, backlog, inflight, policy.placements
        )
        dispatcher.pauser = self._pauser = pauser
        dispatcher.residency = self.residency
        dispatcher.window_when_idle = policy.dispatching.window_when_idle
        self.jobs = table.jobs
        self.units = inflight.units
        self.depth = backlog.depth
        self.work_s = backlog.work_s
        self.pool_work_s = backlog.pool_work_s
        self.running = inflight.running
        self.pool_running_s = inflight.pool_running_s
        self.spot_fallbacks = dispatcher.spot_fallbacks
        self.pauses = pauser.pauses
        self.preemptions = lifecycle.preemptions
        self.ended = lifecycle.ended

    def take_effects(self) -> list[Effect]:
        """Everything the owner must carry out since the last call, in order."""
        return self._outbox.take()

    # ---- jobs ----------------------------------------------------------------------------

    def submit(self, new: NewJob) -> Accepted | Rejection:
        """Accept a job into its queue, or say why not (see `Admission.submit`)."""
        return self._admission.submit(new)

    def prepare(self, new: NewJob) -> Accepted | Rejection:
        """Check and build a job without queueing it (see `Admission.prepare`)."""
        return self._admission.prepare(new)

    def admit(self, job: Job) -> Accepted:
        """Queue a job `prepare` built, once it is durable (see `Admission.admit`)."""
        return self._admission.admit(job)

    def release(self, job: Job) -> None:
        """Give up a job `prepare` built that will not be admitted (see `Admission.release`)."""
        self._admission.release(job)

    def restore(self, job: Job) -> None:
        """Take back a job from the store after a restart; unfinished ones queue again."""
        self._admission.restore(job)

    def cancel(self, job_id: str) -> Job | None:
        """Stop a job wherever it is; None when unknown, the job as it stands otherwise."""
        return self._lifecycle.cancel(job_id)

    def expire_due(self) -> list[Job]:
        """End every job whose deadline has passed; returns them."""
        return self._lifecycle.expire_due()

    def forget(self, job_id: str) -> None:
        """Drop a finished job from memory (the store keeps it for its retention)."""
        self._table.forget(job_id)

    def queue_position(self, job: Job) -> int:
        """Jobs of the same model ahead of `job` (0 = next); see `Backlog.position`."""
        return self._backlog.position(job)

    def estimate_finish_s(self, model: str, priority: Priority, own_cost: float) -> float | None:
        """Seconds until a new job would finish: work ahead of it spread over its units;
        None while no unit serves the model."""
        return self._admission.estimate_finish_s(model, priority, own_cost)

    # ---- dispatch ------------------------------------------------------------------------

    def schedule(self) -> list[Dispatch]:
        """Form and route every batch that can go now (see `Dispatcher.schedule`)."""
        return self._dispatcher.schedule()

    def next_wakeup(self) -> float | None:
        """Earliest time at which a timer (batch window, fallback, deadline) may change things."""
        return self._dispatcher.next_wakeup()

    # ---- workers -------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        """A worker joined (or rejoined: its earlier self is given up on first)."""
        self._lifecycle.register_worker(info)

    def heartbeat(self, worker_id: str, draining: bool = False) -> None:
        """A worker is alive; `draining` when it takes no new batches."""
        self._inflight.heartbeat(worker_id, self.clock(), draining)

    def adapters_loaded(self, worker_id: str, loaded: Mapping[str, Mapping[str, float]]) -> None:
        """A worker's LoRA adapters loaded now, per model, with the seconds each load took."""
        unit = self.units.get(worker_id)
        if unit is None:
            return
        # Only what the registry offers for models the worker hosts: a report is no way to
        # make the scheduler remember arbitrary names.
        known = {
            model: {
                name: seconds
                for name, seconds in names.items()
                if any(a.name == name for a in self.specs[model].adapters)
            }
            for model, names in loaded.items()
            if model in unit.info.models and model in self.specs
        }
        self.affinity.report(unit, known)

    def models_resident(self, worker_id: str, report: Mapping[str, tuple[bool, float]]) -> None:
        """A worker's residency: per hosted model, (loaded now, seconds its last load took)."""
        unit = self.units.get(worker_id)
        if unit is None:
            return
        # Only models the worker hosts: a report is no way to make the scheduler remember
        # arbitrary names.
        hosted = {m: r for m, r in report.items() if m in unit.info.models}
        self.residency.report(unit, hosted)

    def check_liveness(self) -> list[str]:
        """Give up on workers whose heartbeats stopped; returns their ids."""
        return self._lifecycle.check_liveness(self.policy.heartbeat_timeout_s)

    def worker_lost(self, worker_id: str, reason: str) -> None:
        """A worker is gone; its batches' jobs go back in line or fail."""
        self._lifecycle.worker_lost(worker_id, reason)

    # ---- reports from workers ------------------------------------------------------------

    def job_progress(
        self,
        job_id: str,
        batch_id: str,
        step: int,
        total_steps: int,
        step_seconds: float = 0.0,
        preview: Preview | None = None,
    ) -> None:
        """A job of a batch finished a step."""
        self._lifecycle.job_progress(job_id, batch_id, step, total_steps, step_seconds, preview)

    def job_succeeded(self, job_id: str, batch_id: str) -> Job | None:
        """A job of a batch produced its result; None when the report is stale."""
        return self._lifecycle.job_succeeded(job_id, batch_id)

    def job_failed(self, job_id: str, batch_id: str, code: str, message: str) -> None:
        """A job of a batch failed (or was cancelled, code CANCELLED) on its worker."""
        self._lifecycle.job_failed(job_id, batch_id, code, message)

    def job_preempted(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> bool:
        """A job stopped at `step` and saved `checkpoint`; it goes back first in line.
        Whether it had run (a job handed back unstarted keeps its step and counts no
        preemption)."""
        return self._lifecycle.job_preempted(job_id, batch_id, checkpoint, step)

    def batch_fitted(self, job_id: str, fitted: int) -> bool:
        """The job's batch ran out of memory and is retried in batches of at most `fitted`:
        batches of its model and shape are formed no larger from now on. True when that
        lowered the ceiling."""
        job = self.jobs.get(job_id)
        return job is not None and self._dispatcher.batch_caps.learn(job.model, job.params, fitted)

    def job_checkpointed(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> None:
        """A running job saved a checkpoint it can resume from."""
        self._lifecycle.job_checkpointed(job_id, batch_id, checkpoint, step)

    def job_paused(self, job_id: str, batch_id: str) -> None:
        """A job of a batch paused at a step boundary for more urgent work (its worker's
        notice); see `Pauser.job_paused`."""
        self._pauser.job_paused(job_id, batch_id)

    def job_resumed(self, job_id: str) -> None:
        """A job resumed on its worker after a pause, or from a checkpoint."""
        self._pauser.job_resumed(job_id)

    def batch_size(self, batch_id: str) -> int:
        """Jobs the batch was dispatched with (1 when unknown)."""
        return self._lifecycle.batch_size(batch_id)

    def batch_ended(self, batch_id: str) -> None:
        """The worker's stream for this batch closed; anything unreported goes back in line."""
        self._lifecycle.batch_ended(batch_id)

    def batch_undelivered(self, batch_id: str, reason: str) -> None:
        """The worker never took the batch; see `JobLifecycle.batch_undelivered`."""
        self._lifecycle.batch_undelivered(batch_id, reason)

    # ---- views ---------------------------------------------------------------------------

    def queue_depth(self, queue: str) -> int:
        """Jobs queued in a queue (a modality)."""
        return self._backlog.queue_depth(queue)

    def pool_demand_s(self, queue: str, pool: str) -> float:
        """Device-seconds a pool is asked for: work queued that prefers it plus work running
        on it. KEDA scales on this; on the queued part alone a pool that keeps up would read
        near zero while every replica is busy, and be scaled down into a backlog."""
        return self.pool_work_s[(queue, pool)] + self.pool_running_s[(queue, pool)]

    def oldest_wait_s(self, queue: str) -> float:
        """Seconds the longest-waiting job of a queue has waited."""
        return self._backlog.oldest_wait_s(queue, self.clock())

    def queued_jobs(self, model: str) -> list[Job]:
        """A model's queued jobs, in no particular order."""
        return self._backlog.queued_jobs(model)

    def is_paused(self, job: Job) -> bool:
        """Whether the job's batch is paused at a step boundary on its worker now."""
        return self._pauser.is_paused(job)

    def paused_count(self, queue: str) -> int:
        """Jobs of a queue whose batch is paused at a step boundary now (counted in
        `running`, which holds every job dispatched or running)."""
        return self._pauser.paused_count(queue)
