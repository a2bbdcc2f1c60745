"""Build a simulation from a scenario, run it, and collect what the report needs."""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.jobs import GenerationParams, TenantQuota
from mediamesh.scheduler.core.scheduler import SchedulerCore
from mediamesh.scheduler.settings_policy import core_policy
from mediamesh.sim.arrivals import ArrivalPlan, generate
from mediamesh.sim.cluster import Cluster
from mediamesh.sim.engine import Engine
from mediamesh.sim.fleet import DeploymentState, Speed, hosted_models
from mediamesh.sim.load_checks import unservable_models
from mediamesh.sim.records import JobRecords, TimeSeries
from mediamesh.sim.scenario import Autoscale, Deployment, Scenario

_PARAM_NAMES = {f.name for f in fields(GenerationParams)} - {"prompt", "negative_prompt", "seed"}


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the event loop.

    A run holds millions of live objects (jobs, queue entries, records) and allocates far
    more than it frees, so the collector keeps tracing all of them: measured at 8 % of a
    million-job run, for nothing, as the loop creates no reference cycles (jobs, entries
    and effects are freed by reference counting when they end). Restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class SimulationResult:
    scenario: str
    seed: int
    jobs: int
    devices: int
    sim_seconds: float
    wall_seconds: float
    stats: dict[str, Any]
    fleet: dict[str, Any]
    scheduler: dict[str, Any]
    series: TimeSeries
    records: JobRecords
    sla_s: dict[str, float]

    @property
    def jobs_per_wall_s(self) -> float:
        return self.jobs / self.wall_seconds if self.wall_seconds > 0 else math.inf

    @property
    def cost_per_hour(self) -> float:
        hours = self.sim_seconds / 3600
        return self.fleet["cost"] / hours if hours > 0 else 0.0


def job_params(spec: ModelSpec, overrides: dict[str, float | int]) -> GenerationParams:
    """The registry's defaults for a model with the workload's overrides on top."""
    values = spec.defaults.model_dump()
    unknown = set(overrides) - _PARAM_NAMES
    if unknown:
        raise ValueError(f"workload.params.{spec.name}: unknown parameters {sorted(unknown)}")
    values.update(overrides)
    return GenerationParams(prompt="", **{k: v for k, v in values.items() if k in _PARAM_NAMES})


def scale_fleet(fleet: list[Deployment], devices: int) -> list[Deployment]:
    """The same fleet shape with `devices` replicas in all, split by largest remainder."""
    total = sum(d.replicas for d in fleet)
    if total == 0:
        raise ValueError("--devices needs a fleet with replicas to scale")
    factor = devices / total
    shares = [d.replicas * factor for d in fleet]
    counts = [math.floor(s) for s in shares]
    by_remainder = sorted(range(len(fleet)), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[: devices - sum(counts)]:
        counts[i] += 1
    scaled = []
    for deployment, count in zip(fleet, counts, strict=True):
        update: dict[str, Any] = {"replicas": count}
        if deployment.autoscale is not None:
            a = deployment.autoscale
            update["autoscale"] = Autoscale(
                **{
                    **a.model_dump(),
                    "min_replicas": min(math.ceil(a.min_replicas * factor), count),
                    "max_replicas": max(math.ceil(a.max_replicas * factor), count, 1),
                }
            )
        scaled.append(deployment.model_copy(update=update))
    return scaled


@dataclass
class Simulation:
    """A built, not yet run, simulation: what tests and the right-sizer reach into."""

    scenario: Scenario
    seed: int
    plan: ArrivalPlan
    engine: Engine
    cluster: Cluster
    states: list[DeploymentState]
    specs: dict[str, ModelSpec]

    def run(self) -> SimulationResult:
        plan, engine, cluster = self.plan, self.engine, self.cluster
        last_arrival = float(plan.times[-1]) if len(plan) else 0.0
        # Before the run: the autoscaler moves the targets from the first poll on.
        initial_devices = sum(s.target for s in self.states)
        started = time.perf_counter()
        cluster.start()
        with cycle_collection_paused():
            engine.run(until=last_arrival + self.scenario.drain_s)
        wall = time.perf_counter() - started
        cluster.close()
        sla_s = {q: s.sla_s for q, s in self.scenario.scheduler.queues.items()}
        core = engine.core
        return SimulationResult(
            scenario=self.scenario.name,
            seed=self.seed,
            jobs=len(plan),
            devices=initial_devices,
            sim_seconds=engine.now,
            wall_seconds=wall,
            stats=engine.records.summary(self.scenario.scheduler.queues),
            fleet=cluster.accounting.summary(),
            scheduler={
                "batches": engine.dispatches,
                "mean_batch_size": engine.dispatched_jobs / max(engine.dispatches, 1),
                "aborted_over_backlog": engine.aborted,
                "spot_notices": cluster.notices,
                "preemptions": dict(core.preemptions),
                "spot_fallbacks": dict(core.spot_fallbacks),
                "calibrated_step_s_per_unit": {m: core.cost.step_s_per_unit(m) for m in self.specs},
            },
            series=cluster.series,
            records=engine.records,
            sla_s=sla_s,
        )


def build(
    scenario: Scenario,
    jobs: int | None = None,
    devices: int | None = None,
    seed: int | None = None,
    plan: ArrivalPlan | None = None,
) -> Simulation:
    seed = scenario.seed if seed is None else seed
    registry = scenario.registry()
    specs = {s.name: s for s in registry.models}
    workload = scenario.workload
    params = {m: job_params(specs[m], workload.params.get(m, {})) for m in specs}
    plan = plan if plan is not None else generate(workload, seed, jobs)
    fleet = scale_fleet(scenario.fleet, devices) if devices is not None else scenario.fleet
    if devices is not None:
        # Too few devices for every deployment leaves some with none: say so before the run.
        unservable = unservable_models(scenario, fleet, specs, plan.models)
        if unservable:
            raise ValueError(f"--devices {devices}: {unservable}")
    quotas = {
        name: TenantQuota(t.weight, t.max_queued, t.max_running)
        for name, t in workload.tenants.items()
    }
    records = JobRecords(plan, {name: spec.modality for name, spec in specs.items()})
    # The simulated devices have no step boundaries to pause a batch at: no pausing.
    policy = core_policy(scenario.scheduler.model_copy(update={"pause_max_per_job": 0}))
    engine = Engine(registry.models, policy, plan, params, quotas, records, SchedulerCore)
    engine.dispatch_interval_s = scenario.dispatch_interval_s
    speeds = {name: Speed(d, specs, params) for name, d in scenario.device_types.items()}
    states = []
    for deployment in fleet:
        target = deployment.replicas
        if deployment.autoscale is not None:
            scale = deployment.autoscale
            target = min(max(target, scale.min_replicas), scale.max_replicas)
        models = hosted_models(deployment, scenario.device_types[deployment.device], specs)
        states.append(DeploymentState(deployment, models, target))
    last_arrival = float(plan.times[-1]) if len(plan) else 0.0
    sample_s = scenario.sample_s or max(last_arrival / 400, 1.0)
    cluster = Cluster(engine, scenario, states, speeds, sample_s, seed + 1)
    return Simulation(scenario, seed, plan, engine, cluster, states, specs)


def simulate(
    scenario: Scenario,
    jobs: int | None = None,
    devices: int | None = None,
    seed: int | None = None,
    plan: ArrivalPlan | None = None,
) -> SimulationResult:
    """Run a scenario (optionally with fewer or more jobs or devices) and collect results."""
    return build(scenario, jobs, devices, seed, plan).run()
