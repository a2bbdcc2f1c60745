"""Model residency: send a batch to a unit that has its model loaded.

A worker may host more models than it keeps loaded; a batch of a cold model makes it load
the weights first (and evict another model), which costs device time. The time a model
takes to load is learned from the workers' reports (starting from a configured prior).
The dispatcher offers the least-loaded unit that formed the batch; when that unit has the
model cold, a unit of the same class with it resident takes the batch instead if its load
is at most the offered unit's load plus the load time. When only busy resident units are
that cheap, the batch waits for one of them rather than start cold. So a cold start happens
only when it pays: every resident unit is more loaded than the cold one plus the load time.

Pure: no clock is needed (the decision depends on loads only), and no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mediamesh.scheduler.core.load_times import LearnedLoadTimes
from mediamesh.scheduler.core.units import Unit, routing_key


@dataclass(frozen=True)
class ResidencyPolicy:
    """The load time of a model before any worker measured it."""

    load_prior_s: float


class ModelResidency:
    """Learned model load times, the units' cold models, and the routing choice."""

    def __init__(self, policy: ResidencyPolicy) -> None:
        self._load_times: LearnedLoadTimes[str] = LearnedLoadTimes(policy.load_prior_s)
        # Read-only outside this class: batches moved to a resident unit, and cold starts.
        self.resident_choices = 0
        self.cold_starts = 0

    def load_s(self, model: str) -> float:
        """Estimated seconds to load `model` on a unit that has it cold."""
        return self._load_times.estimate(model)

    def observe(self, model: str, seconds: float) -> None:
        """A worker measured one load of `model`."""
        self._load_times.observe(model, seconds)

    def report(self, unit: Unit, residency: Mapping[str, tuple[bool, float]]) -> None:
        """A worker's whole residency report: per hosted model, (loaded now, the seconds
        its last load took, 0 if never measured). A model not in it counts as resident."""
        unit.cold = frozenset(m for m, (resident, _) in residency.items() if not resident)
        for model, (_, seconds) in residency.items():
            self._load_times.reported(unit.worker_id, model, seconds)

    def choose(
        self, offered: Unit, model: str, alternatives: Iterable[Unit], everyone: Iterable[Unit]
    ) -> Unit | None:
        """The unit a batch of `model` goes to: `offered` unless it has the model cold and
        an alternative with room has it resident at a load within the offered unit's plus
        the load time; the least loaded such alternative then. None when no such unit has
        room but one of `everyone` is that cheap: the batch waits for it. The chosen unit
        counts the model as resident from now on (until its next report)."""
        chosen = offered
        if model in offered.cold:
            limit = offered.load_s + self.load_s(model)
            resident = [
                unit
                for unit in alternatives
                if unit is not offered
                and unit.free_slots > 0
                and model in unit.info.models
                and model not in unit.cold
                and unit.load_s <= limit
            ]
            if resident:
                chosen = min(resident, key=routing_key)
                self.resident_choices += 1
            elif self._worth_waiting(offered, model, everyone):
                return None
            else:
                self.cold_starts += 1
        if model in chosen.cold:
            chosen.cold = chosen.cold - {model}
        return chosen

    def _worth_waiting(self, offered: Unit, model: str, units: Iterable[Unit]) -> bool:
        """Whether a batch of `model`, cold on `offered`, should rather wait for another
        unit that has it resident: one (not draining, same pool) whose load is within the
        offered unit's plus the load time. It gets the batch once it has room."""
        limit = offered.load_s + self.load_s(model)
        return any(
            unit is not offered
            and not unit.draining
            and unit.pool == offered.pool
            and model in unit.info.models
            and model not in unit.cold
            and unit.load_s <= limit
            for unit in units
        )
