"""The scheduling policy: queues, batching, routing and job lifecycle, with a clock passed in.

Plain Python with no gRPC, asyncio or torch, so one owner task drives it in the service
and the simulator drives the very same object with a virtual clock. Every call returns
immediately; what must happen outside (store writes, dispatches, cancels, events) is
queued as effects for the owner to take with `take_effects()`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from services.common.registry import ModelSpec
from services.scheduler.core.cost import CostModel
from services.scheduler.core.effects import (
    CancelOnWorker,
    Dispatch,
    Effect,
    Notice,
    Progressed,
    Transition,
)
from services.scheduler.core.jobs import (
    GenerationParams,
    Job,
    JobState,
    Priority,
    TenantQuota,
)
from services.scheduler.core.ledger import CostLedger
from services.scheduler.core.queues import ModelQueue
from services.scheduler.core.stalls import Stall
from services.scheduler.core.units import (
    FreeUnits,
    Placement,
    Unit,
    UnitClass,
    WorkerInfo,
    default_placements,
    pool_decision,
    unit_class,
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


@dataclass
class _Batch:
    batch_id: str
    worker_id: str
    model: str
    job_ids: set[str]
    size: int


class SchedulerCore:
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
        self._queues = {s.name: ModelQueue(s.name, policy.aging_s_per_class) for s in specs}
        self._free = FreeUnits()
        self._batches: dict[str, _Batch] = {}
        self._idempotency: dict[tuple[str, str], str] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._effects: list[Effect] = []
        self._batch_ids = itertools.count()
        self._wakeups: list[float] = []
        # Incremental counters, so metrics and admission never scan every job.
        self.depth: dict[tuple[str, Priority], int] = defaultdict(int)
        self.work_s: dict[str, float] = defaultdict(float)
        self.pool_work_s: dict[tuple[str, str], float] = defaultdict(float)
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
        self._stalls: dict[UnitClass, Stall] = {}
        # (pool, lead priority) -> classes that may join its batch; the policy is fixed.
        self._joinable: dict[tuple[str, Priority], frozenset[Priority]] = {}
        self._charged: dict[str, float] = {}
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
        return sum(self.depth[(queue, p)] for p in Priority)

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
        for batch_id in list(unit.batches):
            self._abandon_batch(batch_id, f"worker {worker_id} lost: {reason}")

    def _abandon_batch(self, batch_id: str, reason: str) -> None:
        batch = self._batches.pop(batch_id, None)
        if batch is None:
            return
        for job_id in list(batch.job_ids):
            job = self.jobs[job_id]
            self._release(job)
            job.worker_losses += 1
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

    # ---- dispatch ------------------------------------------------------------------------

    def schedule(self) -> list[Dispatch]:
        """Form batches for every unit with room, least-loaded unit first.

        A unit that cannot form a batch stays out for the rest of the pass. Whether a unit
        can form one depends only on its pool and models (and on the queues and the other
        units, which change only when something is dispatched), so after one failure every
        unit of that class is skipped until the next dispatch; when a dispatch ends the
        streak, the skipped units that sort before the one that dispatched are blocked, as
        trying each of them in turn would have done. That keeps a pass proportional to its
        dispatches rather than to the number of free units squared.
        """
        now = self.clock()
        self._wakeups = []
        dispatched: list[Dispatch] = []
        models = [m for m, q in self._queues.items() if q.depth > 0]
        blocked: set[str] = set()
        failed_classes: list[UnitClass] = []
        try:
            while models:
                # A failure changes nothing, so each class's head stays valid until a dispatch.
                batch = None
                for entry in self._free.class_heads(models, self.units, blocked):
                    unit = self.units[entry[2]]
                    cls = unit_class(unit)
                    stalled = self._stalled(cls, now)
                    batch = None if stalled else self._form_batch(unit, now)
                    if batch is not None:
                        break
                    blocked.add(unit.worker_id)
                    failed_classes.append(cls)
                if batch is None:
                    break
                for cls in failed_classes:
                    self._free.block_below(cls, entry)
                failed_classes.clear()
                dispatched.append(batch)
                models = [m for m in models if self._queues[m].depth > 0]
        finally:
            self._free.end_pass()
        return dispatched

    def _stalled(self, cls: UnitClass, now: float) -> bool:
        """Whether this class's last failure to form a batch still holds (see stalls.py)."""
        stall = self._stalls.get(cls)
        if stall is None or now >= stall.until or stall.tenants_version != self._limited_version:
            return False
        queues = self._queues
        if stall.queue_versions != tuple(queues[m].version for m in stall.models):
            return False
        if stall.class_orders != tuple(queues[m].class_order(now) for m in stall.models):
            return False
        for (model, pool), room in stall.rooms.items():
            if self._free.has_room(model, pool, self.units) != room:
                return False
        self._wakeups.extend(stall.wakeups)
        return True

    def _limited_count_changed(self, tenant: str, higher_count: int) -> None:
        limit = self._limited_tenants.get(tenant)
        if limit is not None and higher_count + self._max_batch >= limit:
            self._limited_version += 1

    def _remember_stall(
        self, unit: Unit, now: float, rooms: dict[tuple[str, str], bool], wakeups: list[float]
    ) -> None:
        queues = self._queues
        models = tuple(sorted(m for m in unit.info.models if m in queues))
        self._stalls[unit_class(unit)] = Stall(
            models=models,
            queue_versions=tuple(queues[m].version for m in models),
            tenants_version=self._limited_version,
            rooms=dict(rooms),
            class_orders=tuple(queues[m].class_order(now) for m in models),
            until=min((t for t in wakeups if t > now), default=math.inf),
            wakeups=tuple(wakeups),
        )

    def _eligibility(
        self, unit: Unit, now: float, room_cache: dict[tuple[str, str], bool]
    ) -> Callable[[Job], bool]:
        def preferred_has_room(model: str, pool: str) -> bool:
            key = (model, pool)
            if key not in room_cache:
                room_cache[key] = self._free.has_room(model, pool, self.units)
            return room_cache[key]

        def eligible(job: Job) -> bool:
            limit = job.quota.max_running
            if limit and self._running_by_tenant[job.tenant] >= limit:
                return False
            placement = self._placement(job)
            if unit.pool == placement.prefer:
                return True
            ok, _ = pool_decision(
                job, unit, placement, now, preferred_has_room(job.model, placement.prefer)
            )
            falls_back_at = job.enqueued_at + placement.fallback_after_s
            if not ok and unit.pool in placement.allow and falls_back_at > now:
                self._wakeups.append(falls_back_at)
            return ok

        return eligible

    def _form_batch(self, unit: Unit, now: float) -> Dispatch | None:
        rooms: dict[tuple[str, str], bool] = {}
        first_wakeup = len(self._wakeups)
        eligible = self._eligibility(unit, now, rooms)
        options = []
        for model in unit.info.models:
            queue = self._queues.get(model)
            if queue is None or queue.depth == 0:
                continue
            best = queue.best(now, eligible)
            if best is not None:
                options.append(best)
        for _, lead in sorted(options, key=lambda o: o[0]):
            spec = self.specs[lead.model]
            batching = spec.batching
            limit = 1 if batching.mode == "none" else batching.max_batch
            queue = self._queues[lead.model]
            classes = self._joinable_classes(unit, lead)
            joins = self._companion_eligibility(classes, lead)
            companions = queue.companions(lead, limit - 1, joins, classes) if limit > 1 else []
            jobs = [lead, *companions]
            if len(jobs) < limit and not self._window_closed(jobs, batching, now):
                continue
            return self._dispatch(unit, lead.model, jobs, now)
        self._remember_stall(unit, now, rooms, self._wakeups[first_wakeup:])
        return None

    def _joinable_classes(self, unit: Unit, lead: Job) -> frozenset[Priority]:
        """Companions share the lead's pool decision: jobs requeued together (a preempted
        batch) must not be split because their fallback clocks differ by microseconds. Other
        classes join only on their preferred pool. Decided per class, so the queue can skip
        whole classes instead of testing each of their jobs."""
        key = (unit.pool, lead.priority)
        classes = self._joinable.get(key)
        if classes is None:
            placements = self.policy.placements
            classes = frozenset(
                p
                for p in Priority
                if unit.pool == placements[p].prefer
                or (p is lead.priority and unit.pool in placements[p].allow)
            )
            self._joinable[key] = classes
        return classes

    def _companion_eligibility(
        self, classes: frozenset[Priority], lead: Job
    ) -> Callable[[Job], bool]:
        joining: dict[str, int] = defaultdict(int)
        joining[lead.tenant] = 1

        def joins(job: Job) -> bool:
            limit = job.quota.max_running
            if limit and self._running_by_tenant[job.tenant] + joining[job.tenant] >= limit:
                return False
            if job.priority not in classes:
                return False
            joining[job.tenant] += 1
            return True

        return joins

    def _window_closed(self, jobs: list[Job], batching: object, now: float) -> bool:
        max_wait_ms = getattr(batching, "max_wait_ms", None)
        if max_wait_ms is None:
            return False  # static batching without a cap waits for a full batch
        # From acceptance, so a requeued or preempted job does not wait for a window twice.
        closes_at = min(j.created_at for j in jobs) + max_wait_ms / 1000.0
        if now >= closes_at:
            return True
        self._wakeups.append(closes_at)
        return False

    def _dispatch(self, unit: Unit, model: str, jobs: list[Job], now: float) -> Dispatch:
        batch_id = f"{unit.worker_id}-b{next(self._batch_ids)}"
        waits = []
        for job in jobs:
            placement = self._placement(job)
            if unit.pool != placement.prefer and placement.prefer == "spot":
                job.spot_fallback = True
                self.spot_fallbacks[job.queue] += 1
                self._effects.append(
                    Notice(job, "spot_fallback", "no spot capacity in time; running on-demand")
                )
            self._dequeue(job)
            self._queues[model].charge(job)
            job.at_front = False
            job.attempts += 1
            job.worker_id, job.batch_id = unit.worker_id, batch_id
            job.last_worker_id = unit.worker_id
            waits.append(now - job.enqueued_at)
            charge = job.cost_s * job.remaining_fraction
            self._charged[job.job_id] = charge
            unit.load_s += charge
            self.running[job.queue] += 1
            self._running_by_tenant[job.tenant] += 1
            self._limited_count_changed(job.tenant, self._running_by_tenant[job.tenant])
            self._transition(job, JobState.DISPATCHED)
        self._batches[batch_id] = _Batch(
            batch_id, unit.worker_id, model, {j.job_id for j in jobs}, len(jobs)
        )
        unit.batches.add(batch_id)
        unit.dispatched += 1
        unit.version += 1
        self._free.offer(unit)
        dispatch = Dispatch(
            batch_id, unit.worker_id, unit.info.address, model, tuple(jobs), tuple(waits)
        )
        self._effects.append(dispatch)
        return dispatch

    def next_wakeup(self) -> float | None:
        """Earliest time at which a timer (batch window, fallback, deadline) may change things."""
        # A time already past still counts: it means "run again now", e.g. a batch window
        # that closed while the owner was busy applying effects.
        times = list(self._wakeups)
        while self._deadlines and self._deadline_stale(self._deadlines[0]):
            heapq.heappop(self._deadlines)
        if self._deadlines:
            times.append(self._deadlines[0][0])
        return min(times) if times else None

    def _deadline_stale(self, item: tuple[float, str]) -> bool:
        job = self.jobs.get(item[1])
        return job is None or job.state.terminal or job.deadline != item[0]

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

    def _release(self, job: Job) -> None:
        """Take an in-flight job off its unit's load and its batch's open set."""
        charge = self._charged.pop(job.job_id, 0.0)
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

    # ---- housekeeping --------------------------------------------------------------------

    def forget(self, job_id: str) -> None:
        """Drop a finished job from memory (the store keeps it for its retention)."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.terminal:
            return
        del self.jobs[job_id]
        if job.idempotency_key:
            self._idempotency.pop((job.tenant, job.idempotency_key), None)

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
