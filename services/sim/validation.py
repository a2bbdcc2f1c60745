"""Simulate a small local mesh from measured batch times, to check the simulator against a
real `mediamesh up` run driven by the same arrivals (tests/e2e/test_sim_validation.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import PriorityName, SchedulerSettings
from mediamesh.sim.records import SUCCEEDED
from mediamesh.sim.scenario import (
    Arrivals,
    Deployment,
    DeviceType,
    Scenario,
    Workload,
)
from mediamesh.sim.simulation import job_params, simulate


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


@dataclass(frozen=True)
class MeasuredBatch:
    """One batch as a real worker ran it."""

    model: str
    size: int
    # Dispatch to the end of the batch's stream: how long the scheduler could not use the
    # worker for anything else.
    occupied_s: float
    # The worker's StepDone.step_seconds summed over the batch's steps.
    step_s: float


@dataclass(frozen=True)
class DeviceFit:
    """The simulator's device model fitted to measured batches."""

    # One denoising step of a batch of one, per model, at the measured parameters.
    step_seconds: dict[str, float]
    # The rest of a batch of one's occupancy, per model: occupancy minus its steps.
    overhead_s: dict[str, float]
    # A batch of b occupies the worker b**exponent times as long as a batch of one.
    batch_exponent: float


def fit_device(batches: Iterable[MeasuredBatch], steps: dict[str, int]) -> DeviceFit:
    """Least squares of log mean occupancy per (model, size) on log size: one intercept per
    model and one shared slope, as the simulator has one batch exponent per device type.

    Means, not medians, because a queue's capacity is set by the mean service time.
    """
    groups: dict[tuple[str, int], list[float]] = {}
    step_share: dict[str, list[float]] = {}
    for batch in batches:
        groups.setdefault((batch.model, batch.size), []).append(batch.occupied_s)
        shares = step_share.setdefault(batch.model, [0.0, 0.0])
        shares[0] += batch.step_s
        shares[1] += batch.occupied_s
    if len({size for _, size in groups}) < 2:
        raise ValueError("fitting a batch exponent needs batches of at least two sizes")
    models = sorted(step_share)
    rows, targets, weights = [], [], []
    for (model, size), occupied in groups.items():
        row = [0.0] * len(models) + [float(np.log(size))]
        row[models.index(model)] = 1.0
        rows.append(row)
        targets.append(float(np.log(np.mean(occupied))))
        weights.append(float(np.sqrt(len(occupied))))
    w = np.array(weights)
    solution, *_ = np.linalg.lstsq(np.array(rows) * w[:, None], np.array(targets) * w, rcond=None)
    # The scenario schema allows (0, 1]: batching never costs more per job than running alone.
    exponent = float(np.clip(solution[-1], 1e-3, 1.0))
    step_seconds, overhead_s = {}, {}
    for index, model in enumerate(models):
        single = float(np.exp(solution[index]))
        fraction = step_share[model][0] / step_share[model][1]
        step_seconds[model] = single * fraction / steps[model]
        overhead_s[model] = single * (1 - fraction)
    return DeviceFit(step_seconds, overhead_s, exponent)


def write_trace(path: Path, arrivals: Iterable[tuple[float, str]], priority: str) -> Path:
    """A JSON-lines arrival trace (seconds from the first arrival, model) for `arrivals:
    {process: trace}`."""
    rows = sorted(arrivals)
    start = rows[0][0] if rows else 0.0
    lines = (json.dumps({"t": t - start, "model": m, "priority": priority}) for t, m in rows)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def simulate_small_for_validation(
    step_seconds: dict[str, float],
    workers: int = 2,
    jobs: int = 200,
    rate_per_s: float = 5.0,
    models: dict[str, float] | None = None,
    priority: PriorityName = "STANDARD",
    overhead_s: dict[str, float] | None = None,
    batch_exponent: float = 0.8,
    registry_path: Path | None = None,
    scheduler: SchedulerSettings | None = None,
    seed: int = 0,
    trace: Path | None = None,
    params: dict[str, dict[str, float | int]] | None = None,
) -> ValidationResult:
    """Throughput and wait/latency percentiles of `jobs` Poisson arrivals (or the arrivals
    of `trace`, replayed exactly) on `workers` on-demand workers hosting every measured model.

    `step_seconds` is the measured time of one denoising step of a batch of one per model,
    at the registry's defaults with `params` on top (the worker's StepDone.step_seconds);
    `overhead_s` the measured fixed time per job (registry cost.overhead_s if absent).
    """
    registry = load_registry(registry_path)
    specs = {s.name: s for s in registry.models}
    unknown = set(step_seconds) - set(specs)
    if unknown:
        raise ValueError(f"models not in the registry: {sorted(unknown)}")
    params = params or {}
    per_unit = {
        model: seconds
        / job_params(specs[model], params.get(model, {})).work_units(specs[model].modality)
        for model, seconds in step_seconds.items()
    }
    arrivals = (
        Arrivals(process="trace", path=trace)
        if trace is not None
        else Arrivals(process="poisson", rate_per_s=rate_per_s)
    )
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
            arrivals=arrivals,
            models=models or dict.fromkeys(step_seconds, 1.0),
            priorities={priority: 1.0},
            params=params,
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
