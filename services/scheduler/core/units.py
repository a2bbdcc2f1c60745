"""Routing units (one per worker) and the placement rules that match jobs to pools."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from mediamesh.scheduler.core.jobs import Job, Priority

ON_DEMAND = "on-demand"
SPOT = "spot"


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker registers. A multi-device group is still one worker, one unit."""

    worker_id: str
    address: str
    pool: str
    devices: tuple[str, ...]
    models: frozenset[str]
    capacity: int = 1
    # Devices each model occupies (a tensor-parallel model lists one per rank).
    model_devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Models it hosts but is still warming up: shown, never routed (not in `models`).
    warming: frozenset[str] = frozenset()


@dataclass
class Unit:
    """A worker as the dispatcher routes to it: its load, open batches and liveness."""

    info: WorkerInfo
    last_heartbeat: float
    draining: bool = False
    # Estimated device-seconds of work dispatched to it and not yet finished.
    load_s: float = 0.0
    batches: set[str] = field(default_factory=set)
    # When it was last sent a batch (InFlight's running count of batches): see routing_key.
    last_dispatch: int = 0
    # Bumped on every change, so stale heap entries can be recognised.
    version: int = 0
    # Open batches with every job at its last step (InFlight.at_last_step).
    finishing: int = 0
    # LoRA adapters loaded per model, as last reported (or just sent to it): affinity.py.
    adapters: dict[str, frozenset[str]] = field(default_factory=dict)
    # Hosted models whose weights are not loaded, as last reported (or before a batch of
    # one was sent to it): residency.py. Empty for a worker that loads all at start.
    cold: frozenset[str] = frozenset()

    @property
    def worker_id(self) -> str:
        """The worker's id, which is also the unit's."""
        return self.info.worker_id

    @property
    def pool(self) -> str:
        """The capacity pool the worker runs in (on-demand, spot)."""
        return self.info.pool

    @property
    def encodes_off_device(self) -> bool:
        """Whether its batches encode their results on cores its device does not need: true
        of an accelerator (cuda, mps, ...), false of a CPU worker, whose encoding takes the
        cores its next batch would compute on."""
        return any(not device.startswith("cpu") for device in self.info.devices)

    @property
    def free_slots(self) -> int:
        """Batches it can take now; none while draining. A finishing batch leaves room for
        one batch more, given ahead to wait on the worker (InFlight.at_last_step)."""
        if self.draining:
            return 0
        return self.info.capacity - len(self.batches) + min(self.finishing, 1)

    @property
    def state(self) -> str:
        """draining, busy or ready, as operators see it."""
        if self.draining:
            return "draining"
        return "busy" if self.batches else "ready"


@dataclass(frozen=True)
class Placement:
    """Pools a priority class may use, the one it prefers, and when it may leave it."""

    prefer: str
    allow: frozenset[str]
    fallback_after_s: float


# Units that share a pool and a model set are interchangeable to the dispatch policy.
UnitClass = tuple[str, frozenset[str]]
_Entry = tuple[float, int, str, int]


def routing_key(unit: Unit) -> tuple[float, int, str]:
    """Order among units that could take a batch: least loaded first and, among equally
    loaded ones (idle ones, mostly), the one sent a batch most recently. Its caches and
    clocks are still warm: at c=1 through two idle workers taking turns, the time from
    sending a batch to its first step read 4.0-5.5 ms against 4.7-6.9 ms, lower in each of
    six alternating pairs. Light load also gathers on few workers, leaving the others idle
    for an autoscaler to remove."""
    return (unit.load_s, -unit.last_dispatch, unit.worker_id)


def unit_class(unit: Unit) -> UnitClass:
    """The unit's pool and models: what the dispatcher decides by."""
    return (unit.info.pool, unit.info.models)


class FreeUnits:
    """Units with room, least loaded first, per unit class: sorted lists with lazy
    invalidation. Every unit of a class hosts the same models, so one list per class serves
    them all. An entry is live while its unit still has room and the version it was offered
    at; each unit has at most one live entry. A scheduling pass reads the least-loaded
    candidate of each class, and blocks whole key ranges of a class, without walking every
    free unit.
    """

    def __init__(self) -> None:
        self._lists: dict[UnitClass, list[_Entry]] = {}
        # Exact counts of units with room, per class and per (model, pool), so a pass never
        # walks the lists to find out whether a pool has room. Read-only outside this class.
        self._with_room: dict[UnitClass, int] = defaultdict(int)
        self.room_for: dict[tuple[str, str], int] = defaultdict(int)
        self._counted: set[str] = set()
        # Length at which a list is next swept of stale entries.
        self._sweep_at: dict[UnitClass, int] = {}
        # During a pass: per class, units sorting below this entry are blocked.
        self._bounds: dict[UnitClass, _Entry] = {}

    def offer(self, unit: Unit) -> None:
        """Take note of a unit after any change to it (load, batches, draining)."""
        has_room = unit.free_slots > 0
        if has_room != (unit.worker_id in self._counted):
            self._count(unit, 1 if has_room else -1)
        if has_room:
            entry = (*routing_key(unit), unit.version)
            bisect.insort(self._lists.setdefault(unit_class(unit), []), entry)

    def remove(self, unit: Unit) -> None:
        """Forget a unit that left; its stale list entries are dropped lazily."""
        if unit.worker_id in self._counted:
            self._count(unit, -1)

    def _count(self, unit: Unit, change: int) -> None:
        if change > 0:
            self._counted.add(unit.worker_id)
        else:
            self._counted.discard(unit.worker_id)
        self._with_room[unit_class(unit)] += change
        pool = unit.pool
        for model in unit.info.models:
            self.room_for[(model, pool)] += change

    @staticmethod
    def _live(entry: _Entry, units: dict[str, Unit]) -> bool:
        unit = units.get(entry[2])
        return unit is not None and unit.version == entry[3] and unit.free_slots > 0

    def first(
        self, cls: UnitClass, units: dict[str, Unit], blocked: set[str] | None
    ) -> _Entry | None:
        """Least-loaded live entry, past the class's bound and blocked units when `blocked`
        is given; deletes the stale entries it steps over."""
        entries = self._lists[cls]
        if len(entries) > self._sweep_at.get(cls, 64):
            # Stale entries behind the first live one are never stepped over; sweep them.
            entries[:] = [e for e in entries if self._live(e, units)]
            self._sweep_at[cls] = 2 * len(entries) + 64
        bound = self._bounds.get(cls) if blocked is not None else None
        i = 0 if bound is None else bisect.bisect_left(entries, bound)
        while i < len(entries):
            entry = entries[i]
            if not self._live(entry, units):
                del entries[i]
            elif blocked is not None and entry[2] in blocked:
                i += 1
            else:
                return entry
        return None

    def units_with_room(self, cls: UnitClass, units: dict[str, Unit]) -> list[Unit]:
        """Every unit of `cls` with room now, least loaded first (stale entries skipped)."""
        return [units[e[2]] for e in self._lists.get(cls, ()) if self._live(e, units)]

    def classes_with_room(self) -> list[UnitClass]:
        """Unit classes with at least one unit that has room."""
        with_room = self._with_room
        return [cls for cls in self._lists if with_room[cls] > 0]

    def block_below(self, cls: UnitClass, bound: _Entry) -> None:
        """Block, for the rest of the pass, every unit of `cls` that sorts before `bound`."""
        current = self._bounds.get(cls)
        if current is None or current < bound:
            self._bounds[cls] = bound

    def end_pass(self) -> None:
        """Lift every block set during the pass."""
        self._bounds.clear()


def pool_decision(
    job: Job, unit: Unit, placement: Placement, now: float, preferred_has_room: bool
) -> tuple[bool, bool]:
    """(may run here, is a fallback away from the preferred pool)."""
    if unit.pool == placement.prefer:
        return True, False
    if unit.pool not in placement.allow or preferred_has_room:
        return False, False
    waited = now - job.enqueued_at
    if waited < placement.fallback_after_s:
        return False, False
    return True, placement.prefer == SPOT


def pool_views(placements: dict[Priority, Placement]) -> dict[str, frozenset[Priority]]:
    """For every pool the placements name, the classes whose jobs may run there. A pool
    they do not name runs nothing (an empty view)."""
    pools = {pool for p in placements.values() for pool in (p.prefer, *p.allow)}
    return {
        pool: frozenset(
            priority
            for priority, placement in placements.items()
            if pool == placement.prefer or pool in placement.allow
        )
        for pool in pools
    }
