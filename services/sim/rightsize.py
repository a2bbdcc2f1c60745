"""Find the cheapest fixed fleet that meets an SLA target for a scenario's workload.

For each device type and spot share, bisection on the device count finds the smallest fleet
whose jobs (of the chosen priorities) finish within their queue's SLA often enough in every
modality; the cheapest of those per hour wins. Trials share one arrival window (common
random numbers keep the bisection from chasing noise) and stop as soon as the backlog
shows the fleet cannot keep up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mediamesh.common.settings import Pool, SchedulerSettings
from mediamesh.scheduler.core.jobs import Priority
from mediamesh.sim.arrivals import ArrivalPlan, generate
from mediamesh.sim.scenario import Deployment, Scenario, Workload
from mediamesh.sim.simulation import build, job_params


@dataclass(frozen=True)
class Trial:
    device: str
    devices: int
    spot_share: float
    on_demand: int
    spot: int
    cost_per_hour: float
    attainment: dict[str, float]
    meets: bool


@dataclass
class RightSizeResult:
    target: float
    priorities: list[str]
    window_s: float
    jobs: int
    best: Trial | None
    # The smallest fleet meeting the target for each (device, spot share) tried.
    frontier: list[Trial]
    trials: list[Trial]
    # Device types not tried, and why.
    skipped: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "priorities": self.priorities,
            "window_s": self.window_s,
            "jobs": self.jobs,
            "best": asdict(self.best) if self.best else None,
            "frontier": [asdict(t) for t in self.frontier],
            "trials": [asdict(t) for t in self.trials],
            "skipped": self.skipped,
        }


def _worst(trial: Trial) -> float:
    return min(trial.attainment.values(), default=0.0)


def _without_spot_wait(settings: SchedulerSettings) -> SchedulerSettings:
    """A fleet with no spot pool would be deployed with BATCH running on-demand at once, as
    `mediamesh up` does for a local mesh without spot workers."""
    placement = {
        name: rule.model_copy(update={"fallback_after_s": 0.0})
        for name, rule in settings.placement.items()
    }
    return settings.model_copy(update={"placement": placement})


def peak_workload(scenario: Scenario, window_s: float) -> Workload:
    """The workload as it is at its busiest, so the fleet is sized for the peak: a diurnal
    window centred on the sinusoid's crest, a bursty one at its busier rate throughout."""
    workload = scenario.workload
    a = workload.arrivals
    if a.process == "diurnal":
        crest = a.period_s / 4 - window_s / 2
        arrivals = a.model_copy(update={"phase_s": crest})
    elif a.process == "bursty":
        # The busier of the two: a burst rate of 0 (idle spells only) would make no arrivals.
        peak = max(a.burst_rate_per_s, a.idle_rate_per_s)
        arrivals = a.model_copy(update={"process": "poisson", "rate_per_s": peak})
    else:
        return workload
    return workload.model_copy(update={"arrivals": arrivals})


def window_plan(scenario: Scenario, window_s: float, max_jobs: int, seed: int) -> ArrivalPlan:
    """`window_s` seconds of the workload at its peak (at most `max_jobs` arrivals)."""
    workload = peak_workload(scenario, window_s)
    a = workload.arrivals
    if a.process == "trace":
        plan = generate(workload, seed, max_jobs)
        keep = int((plan.times < window_s).sum())
    else:
        peak_rate = a.rate_per_s * (1 + a.amplitude if a.process == "diurnal" else 1)
        plan = generate(workload, seed, max(min(int(peak_rate * window_s * 1.2), max_jobs), 1))
        keep = max(int((plan.times < window_s).sum()), 1)
    return ArrivalPlan(
        plan.times[:keep],
        plan.model[:keep],
        plan.priority[:keep],
        plan.tenant[:keep],
        plan.models,
        plan.tenants,
    )


def _counts(plan: ArrivalPlan) -> dict[str, int]:
    """Jobs per model in `plan`, models without jobs left out."""
    counts = {m: int((plan.model == i).sum()) for i, m in enumerate(plan.models)}
    return {m: n for m, n in counts.items() if n}


def models_without_speed(scenario: Scenario, device: str, plan: ArrivalPlan) -> list[str]:
    """Models of the window's jobs that `device` has no speed for, so cannot run."""
    speeds = scenario.device_types[device].step_s_per_unit
    return [model for model in _counts(plan) if model not in speeds]


def offered_device_s(scenario: Scenario, device: str, plan: ArrivalPlan) -> float | None:
    """Device-seconds the window's jobs need on `device` run one by one; None if it cannot
    run every model in the workload."""
    specs = scenario.specs()
    kind = scenario.device_types[device]
    total = 0.0
    for model, count in _counts(plan).items():
        if model not in kind.step_s_per_unit:
            return None
        spec = specs[model]
        params = job_params(spec, scenario.workload.params.get(model, {}))
        step_s = kind.step_s_per_unit[model] * params.work_units(spec.modality)
        overhead = kind.overhead_s.get(model, spec.cost.overhead_s)
        total += count * (overhead + params.steps * step_s)
    return total


class RightSizer:
    def __init__(
        self,
        scenario: Scenario,
        target: float | None = None,
        window_s: float | None = None,
        seed: int | None = None,
        progress: Callable[[Trial], None] | None = None,
    ) -> None:
        options = scenario.right_size
        self.scenario = scenario
        self.target = target if target is not None else options.target
        self.window_s = window_s if window_s is not None else options.window_s
        self.seed = scenario.seed if seed is None else seed
        self.priorities = {int(Priority[p]) for p in options.priorities} or None
        self.plan = window_plan(scenario, self.window_s, options.max_jobs, self.seed)
        self.sla_s = {q: s.sla_s for q, s in scenario.scheduler.queues.items()}
        self.progress = progress
        self.trials: list[Trial] = []
        self.skipped: dict[str, str] = {}

    def fleet(self, device: str, devices: int, spot_share: float) -> list[Deployment]:
        spot = round(devices * spot_share)
        on_demand = devices - spot
        pools: list[tuple[Pool, int]] = [("on-demand", on_demand), ("spot", spot)]
        return [
            Deployment(name=f"{device}-{pool}", device=device, pool=pool, replicas=count)
            for pool, count in pools
            if count > 0
        ]

    def trial(self, device: str, devices: int, spot_share: float) -> Trial:
        fleet = self.fleet(device, devices, spot_share)
        update: dict[str, Any] = {
            "fleet": fleet,
            "drain_s": 3 * max(self.sla_s.values(), default=60.0),
        }
        if all(d.pool != "spot" for d in fleet):
            update["scheduler"] = _without_spot_wait(self.scenario.scheduler)
        scenario = self.scenario.model_copy(update=update)
        simulation = build(scenario, seed=self.seed, plan=self.plan)
        # Far more queued than the fleet can clear within the SLA: it has already failed.
        simulation.engine.abort_above_queued = 50 * devices
        result = simulation.run()
        attainment = result.records.attainment(self.scenario.scheduler.queues, self.priorities)
        if result.scheduler["aborted_over_backlog"]:
            attainment = dict.fromkeys(attainment, 0.0)
        prices = self.scenario.prices(device)
        counts = {d.pool: d.replicas for d in fleet}
        trial = Trial(
            device=device,
            devices=devices,
            spot_share=spot_share,
            on_demand=counts.get("on-demand", 0),
            spot=counts.get("spot", 0),
            cost_per_hour=sum(prices[pool] * n for pool, n in counts.items()),
            attainment=attainment,
            meets=bool(attainment) and min(attainment.values()) >= self.target,
        )
        self.trials.append(trial)
        if self.progress is not None:
            self.progress(trial)
        return trial

    def smallest(
        self, device: str, spot_share: float, guess: int, informed: bool = False
    ) -> Trial | None:
        """Smallest count meeting the target: bracket upwards from `guess` (gently when it
        came from a neighbouring answer), then bisect to within 2 % (the target is treated
        as monotone in the count). None when more devices stop helping."""
        growth = 1.5 if informed else 2.0
        low, high = 0, max(guess, 1)
        best = self.trial(device, high, spot_share)
        while not best.meets:
            low, high = high, max(math.ceil(high * growth), high + 1)
            previous, best = best, self.trial(device, high, spot_share)
            stuck = _worst(best) <= _worst(previous) + 1e-3
            if not best.meets and stuck and high >= 4 * max(guess, 1):
                return None  # slower than the SLA allows, however many there are
        while high - low > max(1, math.ceil(0.02 * high)):
            middle = (low + high) // 2
            attempt = self.trial(device, middle, spot_share)
            if attempt.meets:
                high, best = middle, attempt
            else:
                low = middle
        return best

    def out_of_reach(self, device: str) -> list[str]:
        """Models too slow on `device` to meet their SLA even unqueued, when their jobs are
        more than the target lets miss."""
        specs = self.scenario.specs()
        kind = self.scenario.device_types[device]
        priorities = self.priorities
        mask = np.isin(self.plan.priority, list(priorities)) if priorities else None
        total = len(self.plan) if mask is None else int(mask.sum())
        slow = []
        for index, model in enumerate(self.plan.models):
            spec = specs[model]
            params = job_params(spec, self.scenario.workload.params.get(model, {}))
            step_s = kind.step_s_per_unit.get(model, math.inf) * params.work_units(spec.modality)
            alone_s = kind.overhead_s.get(model, spec.cost.overhead_s) + params.steps * step_s
            if alone_s <= self.sla_s.get(spec.modality, math.inf):
                continue
            jobs = self.plan.model == index
            count = int((jobs if mask is None else jobs & mask).sum())
            if total and count / total > 1 - self.target:
                slow.append(model)
        return slow

    def run(self) -> RightSizeResult:
        options = self.scenario.right_size
        devices = options.devices or list(self.scenario.device_types)
        frontier: list[Trial] = []
        for device in devices:
            load = offered_device_s(self.scenario, device, self.plan)
            if load is None:
                missing = models_without_speed(self.scenario, device, self.plan)
                self.skipped[device] = (
                    f"no speed for {', '.join(missing)} (device_types.{device}.step_s_per_unit)"
                )
                continue
            slow = self.out_of_reach(device)
            if slow:
                self.skipped[device] = f"too slow for the SLA: {', '.join(slow)}"
                continue
            # Enough devices to run the window's work one job at a time at full use.
            guess, informed = max(math.ceil(load / self.window_s), 1), False
            for spot_share in options.spot_shares:
                found = self.smallest(device, spot_share, guess, informed)
                if found is not None:
                    frontier.append(found)
                    # Later shares start near this answer instead of from scratch.
                    guess, informed = max(round(found.devices * 0.95), 1), True
        best = min(frontier, key=lambda t: t.cost_per_hour, default=None)
        return RightSizeResult(
            target=self.target,
            priorities=sorted(Priority(p).name for p in self.priorities or []) or ["all"],
            window_s=self.window_s,
            jobs=len(self.plan),
            best=best,
            frontier=frontier,
            trials=self.trials,
            skipped=self.skipped,
        )


def right_size(
    scenario: Scenario,
    target: float | None = None,
    window_s: float | None = None,
    seed: int | None = None,
    progress: Callable[[Trial], None] | None = None,
) -> RightSizeResult:
    return RightSizer(scenario, target, window_s, seed, progress).run()
