"""Simulate a small local mesh from measured step times, to check the simulator against a
real `mediamesh up` run driven by the same workload."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.sim.records import SUCCEEDED
from bench.sim.scenario import (
    Arrivals,
    Deployment,
    DeviceType,
    Scenario,
    Workload,
)
from bench.sim.simulation import job_params, simulate
from services.common.registry import load_registry
from services.common.settings import SchedulerSettings


@dataclass(frozen=True)
class ValidationResult:
    jobs: int
    succeeded: int
    # Jobs finished per second between the first arrival and the last completion.
    throughput_jobs_per_s: float
    wait_s: dict[str, float | None]
    latency_s: dict[str, float | None]
    mean_batch_size: float
    simulated_seconds: float


def simulate_small_for_validation(
    step_seconds: dict[str, float],
    workers: int = 2,
    jobs: int = 200,
    rate_per_s: float = 5.0,
    models: dict[str, float] | None = None,
    priority: str = "STANDARD",
    overhead_s: dict[str, float] | None = None,
    batch_exponent: float = 0.8,
    registry_path: Path | None = None,
    scheduler: SchedulerSettings | None = None,
    seed: int = 0,
) -> ValidationResult:
    """Throughput and wait/latency percentiles of `jobs` Poisson arrivals on `workers`
    on-demand workers hosting every measured model.

    `step_seconds` is the measured time of one denoising step of a batch of one at the
    registry's default parameters, per model (the worker's StepDone.step_seconds);
    `overhead_s` the measured fixed time per job (registry cost.overhead_s if absent).
    """
    registry = load_registry(registry_path)
    specs = {s.name: s for s in registry.models}
    unknown = set(step_seconds) - set(specs)
    if unknown:
        raise ValueError(f"models not in the registry: {sorted(unknown)}")
    per_unit = {
        model: seconds / job_params(specs[model], {}).work_units(specs[model].modality)
        for model, seconds in step_seconds.items()
    }
    scenario = Scenario(
        name="validation",
        seed=seed,
        registry_path=registry_path,
        scheduler=scheduler or SchedulerSettings(),
        device_types={
            "measured": DeviceType(
                price_per_hour={"on-demand": 1.0},
                step_s_per_unit=per_unit,
                overhead_s=overhead_s or {},
                batch_exponent=batch_exponent,
            )
        },
        fleet=[Deployment(name="worker", device="measured", replicas=workers)],
        startup_s=0.0,
        workload=Workload(
            jobs=jobs,
            arrivals=Arrivals(process="poisson", rate_per_s=rate_per_s),
            models=models or dict.fromkeys(step_seconds, 1.0),
            priorities={priority: 1.0},
        ),
    )
    result = simulate(scenario)
    records = result.records
    done = records.outcome == SUCCEEDED
    makespan = float(records.finished[done].max() - records.plan.times.min()) if done.any() else 0
    overall = records.overall()
    return ValidationResult(
        jobs=len(records.outcome),
        succeeded=int(done.sum()),
        throughput_jobs_per_s=int(done.sum()) / makespan if makespan > 0 else 0.0,
        wait_s=overall["wait_s"],
        latency_s=overall["latency_s"],
        mean_batch_size=result.scheduler["mean_batch_size"],
        simulated_seconds=result.sim_seconds,
    )
