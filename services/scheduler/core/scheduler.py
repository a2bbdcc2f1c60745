"""The scheduling policy: queues, batching, routing and job lifecycle, with a clock passed in.

Plain Python with no gRPC, asyncio or torch, so one owner task drives it in the service
and the simulator drives the very same object with a virtual clock. Every call returns
immediately; what must happen outside (store writes, dispatches, cancels, events) is
queued as effects for the owner to take with `take_effects()`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.dispatch import DispatchPolicy, OpenBatch
from mediamesh.scheduler.core.effects import (
    Effect,
    Transition,
)
from mediamesh.scheduler.core.jobs import (
    GenerationParams,
    Job,
    JobState,
    Priority,
    TenantQuota,
)
from mediamesh.scheduler.core.ledger import CostLedger
from mediamesh.scheduler.core.lifecycle import JobLifecycle
from mediamesh.scheduler.core.queues import ModelQueue
from mediamesh.scheduler.core.stalls import Stall
from mediamesh.scheduler.core.units import (
    FreeUnits,
    Placement,
    Unit,
    UnitClass,
    WorkerInfo,
    default_placements,
    pool_views,
)


@dataclass(frozen=True)
class QueuePolicy:
    sla_s: float
    max_depth: int


@dataclass(frozen=True)
class CorePolicy:
    queues: dict[str, QueuePolicy]
    aging_s_per_class: float = 30.0
    max_worker_losses: int = 3
    heartbeat_timeout_s: float = 3.0
    placements: dict[Priority, Placement] = field(default_factory=default_placements)
    prices_per_device_hour: dict[str, float] = field(
        default_factory=lambda: {"on-demand": 4.0, "spot": 1.4}
    )


@dataclass(frozen=True)
class NewJob:
    tenant: str
    model: str
    priority: Priority
    params: GenerationParams
    deadline: float | None = None
    idempotency_key: str = ""
    quota: TenantQuota = field(default_factory=TenantQuota)
    trace_carrier: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejection:
    # gRPC status code name.
    code: str
    message: str
    retry_after_s: float = 0.0


@dataclass(frozen=True)
class Accepted:
    job: Job
    deduplicated: bool = False


class SchedulerCore(DispatchPolicy, JobLifecycle):
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
        self._new_id = new_id
        self.cost = CostModel(specs)
        self.jobs: dict[str, Job] = {}
        self.units: dict[str, Unit] = {}
        # Per pool, the priority classes it may run: what its units' decisions depend on.
        self._pool_views = pool_views(policy.placements)
        views = set(self._pool_views.values())
        self._queues = {s.name: ModelQueue(s.name, policy.aging_s_per_class, views) for s in specs}
        self._free = FreeUnits()
        self._batches: dict[str, OpenBatch] = {}
        self._idempotency: dict[tuple[str, str], str] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._effects: list[Effect] = []
        self._batch_ids = itertools.count()
        self._wakeups: list[float] = []
        # Incremental counters, so metrics and admission never scan every job.
        self.depth: dict[tuple[str, Priority], int] = defaultdict(int)
        self._queue_depth: dict[str, int] = defaultdict(int)
        self.work_s: dict[str, float] = defaultdict(float)
        self.pool_work_s: dict[tuple[str, str], float] = defaultdict(float)
        # Device-seconds dispatched to units of a pool and not yet ended (as estimated at
        # dispatch): with `pool_work_s`, the demand a pool's autoscaler sizes it for.
        self.pool_running_s: dict[tuple[str, str], float] = defaultdict(float)
        self.running: dict[str, int] = defaultdict(int)
        self._model_depth: dict[tuple[str, Priority], int] = defaultdict(int)
        self._model_work: dict[tuple[str, Priority], float] = defaultdict(float)
        self._model_front: dict[str, int] = defaultdict(int)
        self._queued_by_tenant: dict[str, int] = defaultdict(int)
        self._running_by_tenant: dict[str, int] = defaultdict(int)
        # Tenants with a concurrency limit (the lowest seen), and a version of their running
        # counts that moves only near the limit: a batch adds at most `_max_batch` jobs, so
        # below that nothing a scheduling pass decides can depend on the exact count.
        self._limited_tenants: dict[str, int] = {}
        self._limited_version = 0
        self._max_batch = max((s.batching.max_batch for s in specs), default=1)
        # Per unit class, per model: its last failure to batch (stalls.py).
        self._stalls: dict[UnitClass, dict[str, Stall]] = {}
        self._class_plans: dict[UnitClass, tuple[frozenset[Priority], bool, list[ModelQueue]]] = {}
        # (pool, lead priority) -> classes that may join its batch; the policy is fixed.
        self._joinable: dict[tuple[str, Priority], frozenset[Priority]] = {}
        # Per in-flight job: the device-seconds charged to its unit, and the unit's pool.
        self._charged: dict[str, tuple[float, str]] = {}
        self.spot_fallbacks: dict[str, int] = defaultdict(int)
        self.preemptions: dict[str, int] = defaultdict(int)
        self.ended: dict[tuple[str, JobState], int] = defaultdict(int)
        self.ledger = CostLedger(dict(policy.prices_per_device_hour))

    # ---- effects -------------------------------------------------------------------------

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    def _transition(self, job: Job, state: JobState, reason: str = "") -> None:
        job.state = state
        if state.terminal:
            job.finished_at = self.clock()
            self.ended[(job.queue, state)] += 1
        self._effects.append(Transition(job, state, reason))

    # ---- admission -----------------------------------------------------------------------

    def submit(self, new: NewJob) -> Accepted | Rejection:
        spec = self.specs.get(new.model)
        if spec is None:
            return Rejection("NOT_FOUND", f"model {new.model!r} is not in the registry")
        if new.idempotency_key:
            existing = self._idempotency.get((new.tenant, new.idempotency_key))
            if existing is not None and existing in self.jobs:
                return Accepted(self.jobs[existing], deduplicated=True)
        queue = spec.modality
        policy = self.policy.queues.get(queue)
        if policy is None:
            return Rejection("FAILED_PRECONDITION", f"no queue is configured for {queue!r}")
        depth = self.queue_depth(queue)
        if depth >= policy.max_depth:
            return Rejection(
                "RESOURCE_EXHAUSTED",
                f"queue {queue!r} is full: {depth} jobs queued, max_depth is {policy.max_depth}",
                self._retry_after(queue),
            )
        quota = new.quota
        if quota.max_queued and self._queued_by_tenant[new.tenant] >= quota.max_queued:
            return Rejection(
                "RESOURCE_EXHAUSTED",
                f"tenant {new.tenant!r} has {self._queued_by_tenant[new.tenant]} jobs queued, "
                f"the limit is {quota.max_queued}",
                self._retry_after(queue),
            )
        now = self.clock()
        cost = self.cost.estimate(new.model, new.params)
        if new.deadline is not None:
            eta = self.estimate_finish_s(new.model, new.priority, cost)
            if now + eta > new.deadline:
                return Rejection(
                    "RESOURCE_EXHAUSTED",
                    f"deadline cannot be met: estimated {eta:.1f} s to finish, "
                    f"{max(new.deadline - now, 0):.1f} s left",
                    max(eta - (new.deadline - now), 1.0),
                )
        job = Job(
            job_id=self._new_id(),
            tenant=new.tenant,
            model=new.model,
            queue=queue,
            priority=new.priority,
            params=new.params,
            created_at=now,
            deadline=new.deadline,
            idempotency_key=new.idempotency_key,
            quota=quota,
            cost_s=cost,
            enqueued_at=now,
            total_steps=new.params.steps,
            trace_carrier=dict(new.trace_carrier),
        )
        self._admit(job)
        self._transition(job, JobState.QUEUED)
        return Accepted(job)

    def restore(self, job: Job) -> None:
        """Take back a job from the store after a restart; unfinished ones queue again."""
        if job.state.terminal:
            self.jobs[job.job_id] = job
            if job.idempotency_key:
                self._idempotency[(job.tenant, job.idempotency_key)] = job.job_id
            return
        job.cost_s = job.cost_s or self.cost.estimate(job.model, job.params)
        if job.state.in_flight:
            # Its worker lost the batch with our connection; run it again, first in line.
            job.at_front = True
        job.state = JobState.QUEUED
        job.enqueued_at = self.clock()
        job.worker_id = job.batch_id = None
        self._admit(job)

    def _admit(self, job: Job) -> None:
        self.jobs[job.job_id] = job
        if job.idempotency_key:
            self._idempotency[(job.tenant, job.idempotency_key)] = job.job_id
        if job.deadline is not None:
            heapq.heappush(self._deadlines, (job.deadline, job.job_id))
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        job.state = JobState.QUEUED
        self._queues[job.model].add(job)
        limit = job.quota.max_running
        if limit and limit < self._limited_tenants.get(job.tenant, limit + 1):
            self._limited_tenants[job.tenant] = limit
        work = job.cost_s * job.remaining_fraction
        self.depth[(job.queue, job.priority)] += 1
        self._queue_depth[job.queue] += 1
        self._model_depth[(job.model, job.priority)] += 1
        self._model_work[(job.model, job.priority)] += work
        self._model_front[job.model] += job.at_front
        self.work_s[job.queue] += work
        self.pool_work_s[(job.queue, self._placement(job).prefer)] += work
        self._queued_by_tenant[job.tenant] += 1

    def _dequeue(self, job: Job) -> None:
        self._queues[job.model].remove(job)
        work = job.cost_s * job.remaining_fraction
        self.depth[(job.queue, job.priority)] -= 1
        self._queue_depth[job.queue] -= 1
        self._model_depth[(job.model, job.priority)] -= 1
        key = (job.model, job.priority)
        self._model_work[key] = max(self._model_work[key] - work, 0.0)
        self._model_front[job.model] -= job.at_front
        self.work_s[job.queue] = max(self.work_s[job.queue] - work, 0.0)
        key = (job.queue, self._placement(job).prefer)
        self.pool_work_s[key] = max(self.pool_work_s[key] - work, 0.0)
        self._queued_by_tenant[job.tenant] -= 1

    def _placement(self, job: Job) -> Placement:
        return self.policy.placements[job.priority]

    def queue_depth(self, queue: str) -> int:
        return self._queue_depth[queue]

    def _units_for(self, model: str) -> list[Unit]:
        return [u for u in self.units.values() if model in u.info.models and not u.draining]

    def _retry_after(self, queue: str) -> float:
        units = {
            u.worker_id
            for u in self.units.values()
            if not u.draining and any(self.specs[m].modality == queue for m in u.info.models)
        }
        depth = max(self.queue_depth(queue), 1)
        per_job = self.work_s[queue] / depth
        return max(per_job / max(len(units), 1), 1.0)

    def estimate_finish_s(self, model: str, priority: Priority, own_cost: float) -> float:
        """Seconds until a new job would finish: work ahead of it spread over its units."""
        units = self._units_for(model)
        if not units:
            return own_cost
        ahead = sum(self._model_work[(model, p)] for p in Priority if p <= priority)
        busy = sum(u.load_s for u in units)
        return (ahead + busy) / len(units) + own_cost

    def queue_position(self, job: Job) -> int:
        """Jobs of the same model ahead of `job` (0 = next), by class and arrival.

        Counted from the per-class depths, so it is O(1): exact for a job that just arrived,
        an estimate later on, when aging and fair share reorder the line.
        """
        if job.state is not JobState.QUEUED:
            return 0
        front = self._model_front[job.model]
        if job.at_front:
            return max(front - 1, 0)
        same_or_better = sum(
            self._model_depth[(job.model, p)] for p in Priority if p <= job.priority
        )
        return max(front + same_or_better - 1, 0)

    # ---- workers -------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        if info.worker_id in self.units:
            self.worker_lost(info.worker_id, "worker registered again")
        unit = Unit(info=info, last_heartbeat=self.clock())
        self.units[info.worker_id] = unit
        self._free.offer(unit)

    def heartbeat(self, worker_id: str, draining: bool = False) -> None:
        unit = self.units.get(worker_id)
        if unit is None:
            return
        unit.last_heartbeat = self.clock()
        if draining and not unit.draining:
            unit.draining = True
            unit.version += 1
            self._free.offer(unit)

    def check_liveness(self) -> list[str]:
        now = self.clock()
        dead = [
            u.worker_id
            for u in self.units.values()
            if now - u.last_heartbeat > self.policy.heartbeat_timeout_s
        ]
        for worker_id in dead:
            self.worker_lost(worker_id, "heartbeats stopped")
        return dead

    def worker_lost(self, worker_id: str, reason: str) -> None:
        unit = self.units.pop(worker_id, None)
        if unit is None:
            return
        self._free.remove(unit)
        for batch_id in list(unit.batches):
            self._abandon_batch(batch_id, f"worker {worker_id} lost: {reason}")

    def _abandon_batch(self, batch_id: str, reason: str, count_loss: bool = True) -> None:
        batch = self._batches.pop(batch_id, None)
        if batch is None:
            return
        for job_id in list(batch.job_ids):
            job = self.jobs[job_id]
            self._release(job)
            job.worker_losses += count_loss
            if job.worker_losses >= self.policy.max_worker_losses:
                job.error_code, job.error_message = (
                    "UNAVAILABLE",
                    f"{reason}; gave up after {job.worker_losses} lost workers",
                )
                self._finish(job, JobState.FAILED, job.error_message)
            else:
                self._requeue_front(job, "requeued", reason)
        unit = self.units.get(batch.worker_id)
        if unit is not None:
            unit.batches.discard(batch_id)
            unit.version += 1
            self._free.offer(unit)

    # ---- housekeeping --------------------------------------------------------------------

    def forget(self, job_id: str) -> None:
        """Drop a finished job from memory (the store keeps it for its retention)."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.terminal:
            return
        del self.jobs[job_id]
        if job.idempotency_key:
            self._idempotency.pop((job.tenant, job.idempotency_key), None)

    def pool_demand_s(self, queue: str, pool: str) -> float:
        """Device-seconds a pool is asked for: work queued that prefers it plus work running
        on it. KEDA scales on this; on the queued part alone a pool that keeps up would read
        near zero while every replica is busy, and be scaled down into a backlog."""
        return self.pool_work_s[(queue, pool)] + self.pool_running_s[(queue, pool)]

    def oldest_wait_s(self, queue: str) -> float:
        now = self.clock()
        oldest = [
            at
            for model, q in self._queues.items()
            if q.depth
            and self.specs[model].modality == queue
            and (at := q.oldest_enqueued_at()) is not None
        ]
        return now - min(oldest) if oldest else 0.0

    def queued_jobs(self, model: str) -> list[Job]:
        return list(self._queues[model].jobs())
