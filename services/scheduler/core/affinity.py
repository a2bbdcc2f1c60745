"""Adapter affinity: send a batch with LoRA adapters to a unit that has them loaded.

A unit without a batch's adapters must load them first, which costs it device time; the
time each adapter took to load is learned from the workers' reports (starting from a
configured prior). The dispatcher offers the least-loaded unit that formed the batch; a
unit of the same class that has every adapter of the batch loaded takes it instead when
its load is within `margin_s` plus that load time of the offered unit's, so a cold unit
is chosen only when it is enough less loaded to pay for the load. Whichever unit takes the
batch is charged the load time of the adapters it lacks along with the batch's work
(`load_on`), so later routing and finish estimates see the cold unit as busy for as long as
it will be.

Pure: no clock is needed (the decision depends on loads only), and no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mediamesh.common.generation import AdapterScale
from mediamesh.scheduler.core.load_times import LearnedLoadTimes
from mediamesh.scheduler.core.units import Unit, routing_key


@dataclass(frozen=True)
class AffinityPolicy:
    """How much load a warm unit may carry beyond a cold one, and the load-time prior."""

    margin_s: float
    load_prior_s: float


class AdapterAffinity:
    """Learned adapter load times, the units' loaded adapters, and the routing choice."""

    def __init__(self, policy: AffinityPolicy) -> None:
        self._policy = policy
        # Keyed by (model, adapter).
        self._load_times: LearnedLoadTimes[tuple[str, str]] = LearnedLoadTimes(policy.load_prior_s)
        # Read-only outside this class: routing choices that moved a batch to a warm unit.
        self.warm_choices = 0

    def load_s(self, model: str, adapters: Iterable[str]) -> float:
        """Estimated seconds to load `adapters` of `model` on a unit that has none of them."""
        return sum(self._load_times.estimate((model, name)) for name in adapters)

    def observe(self, model: str, adapter: str, seconds: float) -> None:
        """A worker measured one load of `adapter`."""
        self._load_times.observe((model, adapter), seconds)

    def report(self, unit: Unit, loaded: Mapping[str, Mapping[str, float]]) -> None:
        """A worker's whole set of loaded adapters, per model, with their load seconds."""
        unit.adapters = {model: frozenset(names) for model, names in loaded.items() if names}
        for model, names in loaded.items():
            for name, seconds in names.items():
                self._load_times.reported(unit.worker_id, (model, name), seconds)

    def choose(
        self,
        offered: Unit,
        model: str,
        adapters: tuple[AdapterScale, ...],
        alternatives: Iterable[Unit],
    ) -> Unit:
        """The unit a batch of `model` with `adapters` goes to: `offered` (the least-loaded
        unit that formed it) unless it lacks an adapter and an alternative has them all at
        a load within the margin plus the adapters' load time; the least loaded such
        alternative then. Changes nothing: the unit the batch finally goes to (residency
        may still move it) is charged by `load_on`."""
        if not adapters:
            return offered
        names = frozenset(a.name for a in adapters)
        missing = names - offered.adapters.get(model, frozenset())
        if not missing:
            return offered
        limit = offered.load_s + self._policy.margin_s + self.load_s(model, missing)
        warm = [
            unit
            for unit in alternatives
            if unit is not offered
            and unit.free_slots > 0
            and names <= unit.adapters.get(model, frozenset())
            and unit.load_s <= limit
        ]
        if not warm:
            return offered
        self.warm_choices += 1
        return min(warm, key=routing_key)

    def load_on(self, unit: Unit, model: str, adapters: tuple[AdapterScale, ...]) -> float:
        """Seconds `unit` will spend loading the `adapters` of `model` it lacks before it can
        run a batch with them, learned per adapter; 0 when it has them all. From now on the
        unit counts them as loaded."""
        if not adapters:
            return 0.0
        names = frozenset(a.name for a in adapters)
        held = unit.adapters.get(model, frozenset())
        missing = names - held
        if not missing:
            return 0.0
        # Until its next report, the unit is taken to hold what it is about to load, so the
        # next batch with these adapters neither avoids it nor pays for the load again.
        unit.adapters = {**unit.adapters, model: held | names}
        return self.load_s(model, sorted(missing))
