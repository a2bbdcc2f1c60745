"""Work in flight: the routing units, the batches open on them, and what each job charged.

Owns the counters of running work (per queue, per pool, per tenant) and the index of units
with room that a scheduling pass walks.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from mediamesh.scheduler.core.batch_tails import BatchTails
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.core.policy import TailEnd
from mediamesh.scheduler.core.units import FreeUnits, Unit, WorkerInfo


@dataclass
class OpenBatch:
    """A batch sent to a worker whose stream has not ended; job_ids shrink as jobs end."""

    batch_id: str
    worker_id: str
    model: str
    job_ids: set[str]
    size: int
    # Jobs that reported their last step; once that is all of them the batch is finishing.
    at_last_step: set[str] = field(default_factory=set)
    finishing: bool = False
    # When its last job reported its last step (None before), and when its first result
    # came after that, to learn the batch's tail.
    last_step_at: float | None = None
    first_result_at: float | None = None


class InFlight:
    """Units, their open batches, and the running work charged to them."""

    def __init__(
        self,
        max_batch: int,
        dispatch_ahead: bool = False,
        ahead_lead_s: float = 0.0,
        tail_end: TailEnd = "auto",
    ) -> None:
        # Read-only outside this class: units by worker id, and the units with room
        # (a scheduling pass walks `free`; only this class offers units to it).
        self.units: dict[str, Unit] = {}
        self.free = FreeUnits()
        # Batches opened so far: a unit records the count at its latest (routing_key).
        self._batches_opened = 0
        self._batches: dict[str, OpenBatch] = {}
        # Per in-flight job: the device-seconds charged to its unit, and the unit's pool.
        self._charged: dict[str, tuple[float, str]] = {}
        # Read-only outside this class. `pool_running_s` is the device-seconds dispatched to
        # units of a pool and not yet ended (as estimated at dispatch): with the queued work,
        # the demand a pool's autoscaler sizes it for.
        self.running: dict[str, int] = defaultdict(int)
        self.pool_running_s: dict[tuple[str, str], float] = defaultdict(float)
        self.running_by_tenant: dict[str, int] = defaultdict(int)
        # Tenants with a concurrency limit (the lowest seen), and a version of their running
        # counts that moves only near the limit: a batch adds at most `max_batch` jobs, so
        # below that nothing a scheduling pass decides can depend on the exact count.
        # `limited_version` is read-only outside this class.
        self._limited_tenants: dict[str, int] = {}
        self.limited_version = 0
        self._max_batch = max_batch
        self._dispatch_ahead = dispatch_ahead
        self._ahead_lead_s = ahead_lead_s
        self._tail_end = tail_end
        self.tails = BatchTails()
        # (when, batch id) of batches at their last step whose unit gets room for the next
        # batch at `when`: `ahead_lead_s` before the batch is expected to end.
        self._ahead_due: list[tuple[float, str]] = []

    # ---- units ---------------------------------------------------------------------------

    def add_unit(self, info: WorkerInfo, now: float) -> None:
        """Route to a newly registered worker."""
        unit = Unit(info=info, last_heartbeat=now)
        self.units[info.worker_id] = unit
        self.free.offer(unit)

    def remove_unit(self, worker_id: str) -> Unit | None:
        """Stop routing to a worker; returns its unit, whose batches are still open."""
        unit = self.units.pop(worker_id, None)
        if unit is not None:
            self.free.remove(unit)
        return unit

    def heartbeat(self, worker_id: str, now: float, draining: bool) -> None:
        """A worker is alive; once it says it is draining it gets no new batches."""
        unit = self.units.get(worker_id)
        if unit is None:
            return
        unit.last_heartbeat = now
        if draining and not unit.draining:
            unit.draining = True
            unit.version += 1
            self.free.offer(unit)

    def silent(self, now: float, timeout_s: float) -> list[str]:
        """Workers not heard from for more than `timeout_s`."""
        return [u.worker_id for u in self.units.values() if now - u.last_heartbeat > timeout_s]

    def serving(self, model: str) -> list[Unit]:
        """Units that host `model` and take new batches."""
        return [u for u in self.units.values() if model in u.info.models and not u.draining]

    def count_serving(self, models: Collection[str]) -> int:
        """Units that host any of `models` and take new batches."""
        return sum(
            1
            for u in self.units.values()
            if not u.draining and any(m in models for m in u.info.models)
        )

    def pool_of(self, worker_id: str | None) -> str | None:
        """The pool of a registered worker; None when it is not (or no longer) registered."""
        unit = self.units.get(worker_id or "")
        return unit.pool if unit is not None else None

    # ---- running work --------------------------------------------------------------------

    def watch_limit(self, job: Job) -> None:
        """Note a queued job's tenant concurrency limit (the lowest seen is kept)."""
        limit = job.quota.max_running
        if limit and limit < self._limited_tenants.get(job.tenant, limit + 1):
            self._limited_tenants[job.tenant] = limit

    def charge(self, job: Job, unit: Unit, setup_s: float = 0.0) -> None:
        """Count a job just dispatched to `unit` as running there, with `setup_s` of work the
        unit does for it before its steps (its share of loading the batch's adapters)."""
        charge = job.cost_s * job.remaining_fraction + setup_s
        self._charged[job.job_id] = (charge, unit.pool)
        unit.load_s += charge
        self.pool_running_s[(job.queue, unit.pool)] += charge
        self.running[job.queue] += 1
        tenant = job.tenant
        self.running_by_tenant[tenant] += 1
        self._limited_count_changed(tenant, self.running_by_tenant[tenant])

    def open_batch(self, unit: Unit, batch_id: str, model: str, job_ids: set[str]) -> None:
        """Record a batch sent to `unit` with the jobs just charged to it."""
        self._batches[batch_id] = OpenBatch(batch_id, unit.worker_id, model, job_ids, len(job_ids))
        unit.batches.add(batch_id)
        self._batches_opened += 1
        unit.last_dispatch = self._batches_opened
        unit.version += 1
        self.free.offer(unit)

    def release(self, job: Job) -> None:
        """Take an in-flight job off its unit's load, its batch's open set and the counts."""
        charge, pool = self._charged.pop(job.job_id, (0.0, ""))
        if pool:
            key = (job.queue, pool)
            self.pool_running_s[key] = max(self.pool_running_s[key] - charge, 0.0)
        unit = self.units.get(job.worker_id or "")
        if unit is not None:
            unit.load_s = max(unit.load_s - charge, 0.0)
            unit.version += 1
            self.free.offer(unit)
        batch = self._batches.get(job.batch_id or "")
        if batch is not None:
            batch.job_ids.discard(job.job_id)
        self.running[job.queue] -= 1
        self.running_by_tenant[job.tenant] -= 1
        self._limited_count_changed(job.tenant, self.running_by_tenant[job.tenant] + 1)

    def _limited_count_changed(self, tenant: str, higher_count: int) -> None:
        limit = self._limited_tenants.get(tenant)
        if limit is not None and higher_count + self._max_batch >= limit:
            self.limited_version += 1

    # ---- batches -------------------------------------------------------------------------

    def batch(self, batch_id: str) -> OpenBatch | None:
        """An open batch, or None once it closed."""
        return self._batches.get(batch_id)

    def at_last_step(self, batch_id: str, job_id: str, now: float) -> None:
        """A job of the batch reported its last denoising step. Once all of its jobs have,
        only decoding and encoding are left: with dispatching ahead, its unit gets room for
        the next batch `ahead_lead_s` before this one is expected to leave the device (at
        once until its model's tail is known), so that batch reaches the worker in time and
        still forms as late as it can."""
        batch = self._batches.get(batch_id)
        if batch is None or batch.finishing or not self._dispatch_ahead:
            return
        batch.at_last_step.add(job_id)
        if not batch.job_ids <= batch.at_last_step or batch.last_step_at is not None:
            return
        batch.last_step_at = now
        tail = self.tails.expected_s(batch.model, batch.size)
        room_at = now if tail is None else now + tail - self._ahead_lead_s
        if room_at <= now:
            self._make_finishing(batch)
        else:
            heapq.heappush(self._ahead_due, (room_at, batch_id))

    def give_due_room(self, now: float) -> None:
        """Room on the units whose running batch is due to end within the lead time."""
        due = self._ahead_due
        while due and due[0][0] <= now:
            _, batch_id = heapq.heappop(due)
            batch = self._batches.get(batch_id)
            if batch is not None and not batch.finishing:
                self._make_finishing(batch)

    def next_room_at(self) -> float | None:
        """When `give_due_room` next has something to do, if ever."""
        due = self._ahead_due
        while due and due[0][1] not in self._batches:
            heapq.heappop(due)
        return due[0][0] if due else None

    def result_arrived(self, batch_id: str, now: float) -> None:
        """A job of the batch ended with a result or a failure."""
        batch = self._batches.get(batch_id)
        if batch is not None and batch.last_step_at is not None and batch.first_result_at is None:
            batch.first_result_at = now

    def batch_done(self, batch: OpenBatch, now: float) -> None:
        """The batch ended with every job reported: learn its tail, then close it.

        On an accelerator the tail ends at the batch's first result, not its last. A worker
        lets the device go once the batch has decoded and encodes the results one after
        another on the CPU while the next batch computes; its first result is the first sign
        of that, so the next batch is there when the device frees rather than once every
        result is out. A CPU worker encodes on the cores its next batch computes on, so
        there the tail runs to the last result: ending it at the first raised the busy ratio
        of two 1-thread `flux-tiny` workers at c=32 from 0.77 to 0.82, but the batches fell
        from 9.6 to 8.9 jobs and the throughput from 264-270 to 246-258 img/s. The
        `tail_end` policy may set either end for every unit (`dispatch_ahead_tail_end`)."""
        if batch.last_step_at is not None:
            ended = now
            if batch.first_result_at is not None and self._tail_ends_at_first_result(batch):
                ended = batch.first_result_at
            self.tails.observe(batch.model, batch.size, ended - batch.last_step_at)
        self.close_batch(batch)

    def _tail_ends_at_first_result(self, batch: OpenBatch) -> bool:
        if self._tail_end != "auto":
            return self._tail_end == "first_result"
        unit = self.units.get(batch.worker_id)
        return unit is not None and unit.encodes_off_device

    def _make_finishing(self, batch: OpenBatch) -> None:
        batch.finishing = True
        unit = self.units.get(batch.worker_id)
        if unit is not None:
            unit.finishing += 1
            unit.version += 1
            self.free.offer(unit)

    def pop_batch(self, batch_id: str) -> OpenBatch | None:
        """Stop tracking a batch; its unit keeps it until `close_batch`."""
        return self._batches.pop(batch_id, None)

    def close_batch(self, batch: OpenBatch) -> None:
        """Free the batch's slot on its unit, if the unit is still registered."""
        self._batches.pop(batch.batch_id, None)
        unit = self.units.get(batch.worker_id)
        if unit is not None:
            if batch.finishing and batch.batch_id in unit.batches:
                unit.finishing -= 1
            unit.batches.discard(batch.batch_id)
            unit.version += 1
            self.free.offer(unit)
