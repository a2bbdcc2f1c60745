"""Forming batches and routing them: the part of the scheduler core that runs on every pass."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.affinity import AdapterAffinity
from mediamesh.scheduler.core.backlog import Backlog
from mediamesh.scheduler.core.batch_caps import BatchCaps
from mediamesh.scheduler.core.effects import (
    Dispatch,
    Notice,
)
from mediamesh.scheduler.core.inflight import InFlight
from mediamesh.scheduler.core.job_table import JobTable
from mediamesh.scheduler.core.jobs import (
    Job,
    JobState,
    Priority,
)
from mediamesh.scheduler.core.outbox import Outbox
from mediamesh.scheduler.core.pausing import Pauser
from mediamesh.scheduler.core.queues import ModelQueue
from mediamesh.scheduler.core.residency import ModelResidency
from mediamesh.scheduler.core.stalls import Stall
from mediamesh.scheduler.core.units import (
    Placement,
    Unit,
    UnitClass,
    pool_decision,
    unit_class,
)

_NOTHING: frozenset[Priority] = frozenset()
_PRIORITIES = tuple(Priority)
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def start_tag(now: float) -> str:
    """The scheduler start's part of its batch ids: the start's millisecond, in base 36 (8
    characters until 2059). The count after it restarts at 0 with the scheduler, and the ids
    outlive it (logs, stored jobs' batch_id, spans): without this a restarted scheduler's
    "w1-b0" named a batch its predecessor had already run. A worker id of the most
    characters (128) still leaves a batch id within its 160."""
    millis = max(int(now * 1000), 0)
    digits = ""
    while True:
        millis, digit = divmod(millis, 36)
        digits = _BASE36[digit] + digits
        if not millis:
            return digits


class Dispatcher:
    """Which jobs go together, and to which unit.

    Owns what makes a pass cheap (per unit class, its plan and its models' last failures)
    and the timers a pass found; takes jobs from the backlog and charges them to units.
    """

    def __init__(
        self,
        specs: Mapping[str, ModelSpec],
        placements: Mapping[Priority, Placement],
        pool_views: Mapping[str, frozenset[Priority]],
        clock: Callable[[], float],
        table: JobTable,
        backlog: Backlog,
        inflight: InFlight,
        outbox: Outbox,
        affinity: AdapterAffinity,
    ) -> None:
        self._specs = specs
        self._affinity = affinity
        self._placements = placements
        # Per pool, the priority classes it may run: what its units' decisions depend on.
        self._pool_views = pool_views
        self._clock = clock
        self._table = table
        self._backlog = backlog
        self._inflight = inflight
        self._outbox = outbox
        self._batch_ids = itertools.count()
        self._batch_id_start = start_tag(clock())
        self._wakeups: list[float] = []
        # Per unit class, per model: its last failure to batch (stalls.py).
        self._stalls: dict[UnitClass, dict[str, Stall]] = {}
        self._class_plans: dict[UnitClass, tuple[frozenset[Priority], bool, list[ModelQueue]]] = {}
        # (pool, lead priority) -> classes that may join its batch; the policy is fixed.
        self._joinable: dict[tuple[str, Priority], tuple[Priority, ...]] = {}
        # Read-only outside this class.
        self.spot_fallbacks: dict[str, int] = defaultdict(int)
        # Pauses lower-class batches for urgent work once no unit has room (pausing.py).
        self.pauser: Pauser | None = None
        # Batch ceilings learned from out-of-memory splits.
        self.batch_caps = BatchCaps()
        # Routes a batch of a model cold on its unit to one that has it loaded (residency.py).
        self.residency: ModelResidency | None = None
        # Whether a batch for an idle unit waits out its batch window (DispatchPolicy).
        self.window_when_idle = True

    def schedule(self) -> list[Dispatch]:
        """Form batches for every unit with room, least-loaded unit first.

        A unit that cannot form a batch stays out for the rest of the pass. Whether a unit
        can form one depends only on its pool and models (and on the queues and the other
        units, which change only when something is dispatched), so after one failure every
        unit of that class is skipped until the next dispatch; when a dispatch ends the
        streak, the skipped units that sort before the one that dispatched are blocked, as
        trying each of them in turn would have done. That keeps a pass proportional to its
        dispatches rather than to the number of free units squared.

        A class whose every queued model is still stalled (stalls.py) would fail whichever
        of its units were tried, so it counts as failed without looking for its head unit.
        """
        now = self._clock()
        self._wakeups = []
        self._inflight.give_due_room(now)
        dispatched: list[Dispatch] = []
        backlog = self._backlog
        free, units = self._inflight.free, self._inflight.units
        blocked: set[str] = set()
        failed_classes: list[UnitClass] = []
        try:
            while backlog.has_queued():
                # A failure changes nothing, so each class's head stays valid until a dispatch.
                # A class with nothing queued fails too; blocking its units is then harmless,
                # as a pass only ever takes jobs out of the queues.
                heads = []
                for cls in free.classes_with_room():
                    candidates = self._candidates(cls, now)
                    if not candidates:
                        failed_classes.append(cls)
                        continue
                    first = free.first(cls, units, blocked)
                    if first is not None:
                        heads.append((first, candidates))
                heads.sort(key=lambda head: head[0])
                batch = None
                for entry, candidates in heads:
                    unit = units[entry[2]]
                    batch = self._form_batch(unit, candidates, now)
                    if batch is not None:
                        break
                    blocked.add(unit.worker_id)
                    failed_classes.append(unit_class(unit))
                if batch is None:
                    break
                for cls in failed_classes:
                    free.block_below(cls, entry)
                failed_classes.clear()
                dispatched.append(batch)
        finally:
            free.end_pass()
        if self.pauser is not None:
            dispatched.extend(self.pauser.plan(now, self.form_urgent))
        return dispatched

    def form_urgent(
        self, unit: Unit, queue: ModelQueue, above: Priority, pauses: str, now: float
    ) -> Dispatch | None:
        """A batch of `queue`'s jobs of classes above `above` for the busy `unit`, pausing its
        batch `pauses`; None when none can go now. Formed from the job the queue would run
        next and the urgent jobs already waiting, without a batch window: the paused batch
        waits as long as the urgent one runs, so holding it open would delay both."""
        eligible = self._eligibility(unit, now, {})
        best = queue.best(now, eligible)
        if best is None or best[1].priority >= above:
            return None
        lead = best[1]
        batching = self._specs[lead.model].batching
        limit = self._batch_limit(lead)
        classes = tuple(p for p in self._joinable_classes(unit, lead) if p < above)
        joins = self._companion_eligibility(classes, lead)
        companions = queue.companions(lead, limit - 1, joins, classes) if limit > 1 else []
        jobs = [lead, *companions]
        # Static batching promises full batches (up to its cap), urgent or not.
        static = batching.mode == "static"
        if static and len(jobs) < limit and not self._window_closed(jobs, batching, now):
            return None
        return self._dispatch(unit, lead.model, jobs, now, pauses)

    def next_wakeup(self) -> float | None:
        """Earliest time at which a timer (batch window, fallback, deadline, room for a batch
        given ahead) may change things."""
        # A time already past still counts: it means "run again now", e.g. a batch window
        # that closed while the owner was busy applying effects.
        times = list(self._wakeups)
        deadline = self._table.next_deadline()
        if deadline is not None:
            times.append(deadline)
        room_at = self._inflight.next_room_at()
        if room_at is not None:
            times.append(room_at)
        return min(times) if times else None

    def _candidates(self, cls: UnitClass, now: float) -> list[ModelQueue]:
        """Queues of the class's models that have jobs and no failure that still holds.

        A failure holds (stalls.py) while the model's queue, the limited tenants' running
        counts, the room of the pools it consulted and its class order are unchanged and
        none of its timers has passed; its earliest timer then still counts as a wakeup.
        Runs for every class on every pass, hence written out in one loop, cheapest tests
        first.
        """
        plan = self._class_plans.get(cls)
        if plan is None:
            plan = self._class_plans[cls] = self._plan_class(cls)
        view, ordered, queues = plan
        stalls = self._stalls.get(cls)
        if stalls is None:
            stalls = self._stalls[cls] = {}
        inflight = self._inflight
        room_for = inflight.free.room_for
        limited = inflight.limited_version
        candidates = []
        for queue in queues:
            if not queue.depth:
                continue
            stall = stalls.get(queue.model)
            if (
                stall is None
                or stall.queue_version != queue.view_versions.get(view, 0)
                or now >= stall.until
                or stall.tenants_version != limited
                or (ordered and stall.class_order != queue.class_order_in(view, now))
            ):
                candidates.append(queue)
                continue
            for key, room in stall.rooms:
                if (room_for[key] > 0) is not room:
                    candidates.append(queue)
                    break
            else:
                if stall.next_wakeup < math.inf:
                    self._wakeups.append(stall.next_wakeup)
        return candidates

    def _plan_class(self, cls: UnitClass) -> tuple[frozenset[Priority], bool, list[ModelQueue]]:
        """What `_candidates` needs of a class, fixed with the policy and the registry: its
        pool's view, whether that view ranks several classes, and its models' queues."""
        view = self._pool_views.get(cls[0], _NOTHING)
        queues = [q for model in cls[1] if (q := self._backlog.queue(model)) is not None]
        return view, len(view) > 1, queues

    def _remember_stall(
        self,
        cls: UnitClass,
        queue: ModelQueue,
        now: float,
        rooms: dict[tuple[str, str], bool],
        wakeups: list[float],
    ) -> None:
        # `_candidates` planned the class before any of its models could stall.
        view = self._class_plans[cls][0]
        earliest = until = math.inf
        for time in wakeups:
            if time < earliest:
                earliest = time
            if now < time < until:
                until = time
        model = queue.model
        self._stalls[cls][model] = Stall(
            queue.view_versions.get(view, 0),
            self._inflight.limited_version,
            tuple([(key, room) for key, room in rooms.items() if key[0] == model]) if rooms else (),
            queue.class_order_in(view, now),
            until,
            earliest,
        )

    def _eligibility(
        self, unit: Unit, now: float, room_cache: dict[tuple[str, str], bool]
    ) -> Callable[[Job], bool]:
        """Whether a job may lead a batch on `unit` now. Records in `room_cache` each
        preferred pool whose room it consulted, for the stall (stalls.py)."""
        running, placements = self._inflight.running_by_tenant, self._placements
        room_for, pool = self._inflight.free.room_for, unit.pool

        def eligible(job: Job) -> bool:
            limit = job.quota.max_running
            if limit and running[job.tenant] >= limit:
                return False
            placement = placements[job.priority]
            if pool == placement.prefer:
                return True
            key = (job.model, placement.prefer)
            room = room_cache.get(key)
            if room is None:
                room = room_cache[key] = room_for[key] > 0
            ok, _ = pool_decision(job, unit, placement, now, room)
            falls_back_at = job.enqueued_at + placement.fallback_after_s
            if not ok and unit.pool in placement.allow and falls_back_at > now:
                self._wakeups.append(falls_back_at)
            return ok

        return eligible

    def _form_batch(self, unit: Unit, candidates: list[ModelQueue], now: float) -> Dispatch | None:
        """The unit's batch from one of `candidates`, or None when none can form one now.

        Each model is decided on its own (its queue, its tenants' limits, its pools' room,
        its timers), so a model whose last failure still holds is not a candidate; a new
        job of one model re-examines only that model on every class hosting it.
        """
        cls = unit_class(unit)
        rooms: dict[tuple[str, str], bool] = {}
        eligible = self._eligibility(unit, now, rooms)
        options = []
        for queue in candidates:
            first_wakeup = len(self._wakeups)
            best = queue.best(now, eligible)
            wakeups = self._wakeups[first_wakeup:]
            if best is None:
                self._remember_stall(cls, queue, now, rooms, wakeups)
            else:
                options.append((best[0], best[1], wakeups, queue))
        if len(options) > 1:
            options.sort(key=lambda o: o[0])
        for _, lead, wakeups, queue in options:
            batching = self._specs[lead.model].batching
            limit = self._batch_limit(lead)
            classes = self._joinable_classes(unit, lead)
            joins = self._companion_eligibility(classes, lead)
            companions = queue.companions(lead, limit - 1, joins, classes) if limit > 1 else []
            jobs = [lead, *companions]
            first_wakeup = len(self._wakeups)
            # Without `window_when_idle` an idle device starts at once; only a batch given
            # ahead to a busy unit waits for its window. That decision then depends on the
            # unit, not only its class, so such a failure is not remembered as the class's.
            # Static batching promises full batches, so it waits on an idle device too.
            waits_when_idle = self.window_when_idle or batching.mode == "static"
            idle = not unit.batches
            if (
                len(jobs) < limit
                and (waits_when_idle or not idle)
                and not self._window_closed(jobs, batching, now)
            ):
                wakeups += self._wakeups[first_wakeup:]
                if waits_when_idle:
                    self._remember_stall(cls, queue, now, rooms, wakeups)
                continue
            adapters = lead.params.adapters
            if adapters:
                alternatives = self._inflight.free.units_with_room(cls, self._inflight.units)
                unit = self._affinity.choose(unit, lead.model, adapters, alternatives)
            if self.residency is not None and lead.model in unit.cold:
                units = self._inflight.units
                alternatives = self._inflight.free.units_with_room(cls, units)
                routed = self.residency.choose(unit, lead.model, alternatives, units.values())
                if routed is None:
                    continue  # a busy unit with the model loaded takes it sooner
                unit = routed
            return self._dispatch(unit, lead.model, jobs, now)
        return None

    def _batch_limit(self, lead: Job) -> int:
        """Most jobs a batch led by `lead` may hold: the registry's max_batch, lowered to
        what out-of-memory splits taught for the lead's shape (batch_caps.py)."""
        batching = self._specs[lead.model].batching
        configured = 1 if batching.mode == "none" else batching.max_batch
        return self.batch_caps.limit(lead.model, lead.params, configured)

    def _joinable_classes(self, unit: Unit, lead: Job) -> tuple[Priority, ...]:
        """Companions share the lead's pool decision: jobs requeued together (a preempted
        batch) must not be split because their fallback clocks differ by microseconds. Other
        classes join only on their preferred pool. Decided per class, so the queue can skip
        whole classes instead of testing each of their jobs. Highest class first."""
        key = (unit.pool, lead.priority)
        classes = self._joinable.get(key)
        if classes is None:
            placements = self._placements
            classes = tuple(
                p
                for p in _PRIORITIES
                if unit.pool == placements[p].prefer
                or (p is lead.priority and unit.pool in placements[p].allow)
            )
            self._joinable[key] = classes
        return classes

    def _companion_eligibility(
        self, classes: tuple[Priority, ...], lead: Job
    ) -> Callable[[Job], bool]:
        joining: dict[str, int] = defaultdict(int)
        joining[lead.tenant] = 1
        running = self._inflight.running_by_tenant

        def joins(job: Job) -> bool:
            limit = job.quota.max_running
            if limit and running[job.tenant] + joining[job.tenant] >= limit:
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

    def _dispatch(
        self, unit: Unit, model: str, jobs: list[Job], now: float, pauses: str = ""
    ) -> Dispatch:
        batch_id = f"{unit.worker_id}-{self._batch_id_start}-b{next(self._batch_ids)}"
        backlog, inflight, outbox, placements = (
            self._backlog,
            self._inflight,
            self._outbox,
            self._placements,
        )
        waits = []
        # Every job of a batch has the same adapters (its compat key); the time the unit
        # spends loading those it lacks delays the whole batch, so the jobs share it: it
        # counts in the unit's load until they end, and leaves with them.
        setup_share_s = self._affinity.load_on(unit, model, jobs[0].params.adapters) / len(jobs)
        for job in jobs:
            placement = placements[job.priority]
            if unit.pool != placement.prefer and placement.prefer == "spot":
                job.spot_fallback = True
                self.spot_fallbacks[job.queue] += 1
                outbox.emit(
                    Notice(job, "spot_fallback", "no spot capacity in time; running on-demand")
                )
            backlog.take(job)
            job.at_front = False
            job.attempts += 1
            job.worker_id, job.batch_id = unit.worker_id, batch_id
            job.last_worker_id = unit.worker_id
            waits.append(now - job.enqueued_at)
            inflight.charge(job, unit, setup_share_s)
            outbox.transition(job, JobState.DISPATCHED)
        inflight.open_batch(unit, batch_id, model, {j.job_id for j in jobs})
        dispatch = Dispatch(
            batch_id, unit.worker_id, unit.info.address, model, tuple(jobs), tuple(waits), pauses
        )
        outbox.emit(dispatch)
        return dispatch
