"""What the scheduler holds for each registered worker outside the core, and lets go of
when the worker departs: its `mediamesh_device_load` series and its channel."""

from __future__ import annotations

from collections.abc import Mapping

from mediamesh.scheduler import metrics
from mediamesh.scheduler.batches import WorkerLink
from mediamesh.scheduler.core.units import Unit, WorkerInfo


class WorkerRoster:
    """Registrations seen, kept until the core no longer routes to them.

    A worker departs in several ways (its session closes, its heartbeats stop, a batch
    cannot reach it, it registers again as someone new); comparing with the core's units
    after each covers them all without the core having to report departures.
    """

    def __init__(self, link: WorkerLink) -> None:
        self._link = link
        self._known: dict[str, WorkerInfo] = {}

    def registered(self, info: WorkerInfo) -> None:
        """Remember a registration the core has just accepted."""
        self._known[info.worker_id] = info

    def release_departed(self, units: Mapping[str, Unit]) -> list[str]:
        """Forget every remembered registration the core no longer has; returns their ids."""
        live_addresses = {unit.info.address for unit in units.values()}
        departed = []
        for worker_id, info in list(self._known.items()):
            unit = units.get(worker_id)
            if unit is not None and unit.info is info:
                continue
            del self._known[worker_id]
            departed.append(worker_id)
            current = set(unit.info.devices) if unit is not None else set()
            metrics.forget_worker(worker_id, set(info.devices) - current)
            # A successor may have taken the address; its channel is its own.
            if info.address not in live_addresses:
                self._link.reset(info.address)
        return departed
