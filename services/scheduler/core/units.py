"""Routing units (one per worker) and the placement rules that match jobs to pools."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from services.scheduler.core.jobs import Job, Priority

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


@dataclass
class Unit:
    info: WorkerInfo
    last_heartbeat: float
    draining: bool = False
    # Estimated device-seconds of work dispatched to it and not yet finished.
    load_s: float = 0.0
    batches: set[str] = field(default_factory=set)
    # Batches ever sent here: breaks load ties so equal devices share work evenly.
    dispatched: int = 0
    # Bumped on every change, so stale heap entries can be recognised.
    version: int = 0

    @property
    def worker_id(self) -> str:
        return self.info.worker_id

    @property
    def pool(self) -> str:
        return self.info.pool

    @property
    def free_slots(self) -> int:
        return 0 if self.draining else self.info.capacity - len(self.batches)

    @property
    def state(self) -> str:
        if self.draining:
            return "draining"
        return "busy" if self.batches else "ready"


@dataclass(frozen=True)
class Placement:
    """Pools a priority class may use, the one it prefers, and when it may leave it."""

    prefer: str
    allow: frozenset[str]
    fallback_after_s: float


class FreeUnits:
    """Units with room, least loaded first, per model: a heap with lazy invalidation."""

    def __init__(self) -> None:
        self._heaps: dict[str, list[tuple[float, int, str, int]]] = {}
        self._tiebreak = itertools.count()

    def offer(self, unit: Unit) -> None:
        if unit.free_slots <= 0:
            return
        for model in unit.info.models:
            heap = self._heaps.setdefault(model, [])
            heapq.heappush(heap, (unit.load_s, unit.dispatched, unit.worker_id, unit.version))

    def ordered(self, model: str, units: dict[str, Unit]) -> list[Unit]:
        """Live free units hosting `model`, least loaded first; prunes stale entries."""
        heap = self._heaps.get(model, [])
        live: list[tuple[float, int, str, int]] = []
        seen: set[str] = set()
        while heap:
            item = heapq.heappop(heap)
            unit = units.get(item[2])
            if unit is None or unit.version != item[3] or unit.free_slots <= 0:
                continue
            if unit.worker_id in seen:
                continue
            seen.add(unit.worker_id)
            live.append(item)
        for item in live:
            heapq.heappush(heap, item)
        return [units[item[2]] for item in sorted(live)]


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


def default_placements() -> dict[Priority, Placement]:
    return {
        Priority.REALTIME: Placement(ON_DEMAND, frozenset({ON_DEMAND}), 0.0),
        Priority.STANDARD: Placement(ON_DEMAND, frozenset({ON_DEMAND}), 0.0),
        Priority.BATCH: Placement(SPOT, frozenset({SPOT, ON_DEMAND}), 30.0),
    }
