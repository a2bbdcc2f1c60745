"""Arrival streams as arrays: times, and which model, priority and tenant each job is.

Generated up front with numpy so a million arrivals cost milliseconds, not a Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from mediamesh.scheduler.core.jobs import Priority
from mediamesh.sim.errors import ScenarioError
from mediamesh.sim.scenario import Arrivals, Workload
from mediamesh.sim.trace import read_trace


@dataclass(frozen=True)
class ArrivalPlan:
    times: np.ndarray  # float64 seconds, nondecreasing
    model: np.ndarray  # index into `models`
    priority: np.ndarray  # Priority value
    tenant: np.ndarray  # index into `tenants`
    models: tuple[str, ...]
    tenants: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.times)


def _poisson(rng: np.random.Generator, rate: float, count: int) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate, count))


def _bursty(rng: np.random.Generator, spec: Arrivals, count: int) -> np.ndarray:
    """On/off Poisson: bursts and idle spells of exponential length, each with its own rate."""
    chunks: list[np.ndarray] = []
    have, start, burst = 0, 0.0, True
    while have < count:
        mean = spec.mean_burst_s if burst else spec.mean_idle_s
        rate = spec.burst_rate_per_s if burst else spec.idle_rate_per_s
        length = rng.exponential(mean)
        if rate > 0:
            expected = rate * length
            # Draw generously, then keep the ones inside the spell.
            draws = int(expected + 6 * math.sqrt(expected) + 10)
            times = start + np.cumsum(rng.exponential(1.0 / rate, draws))
            times = times[times < start + length]
            chunks.append(times)
            have += len(times)
        start += length
        burst = not burst
    return np.concatenate(chunks)[:count]


def _diurnal(rng: np.random.Generator, spec: Arrivals, count: int) -> np.ndarray:
    """Sinusoidal rate by thinning a Poisson stream at the peak rate."""
    peak = spec.rate_per_s * (1 + spec.amplitude)
    chunks: list[np.ndarray] = []
    have, start = 0, 0.0
    while have < count:
        draws = max(int((count - have) * 1.1 * peak / spec.rate_per_s), 1000)
        times = start + np.cumsum(rng.exponential(1.0 / peak, draws))
        start = float(times[-1])
        phase = 2 * math.pi * (times + spec.phase_s) / spec.period_s
        rate = spec.rate_per_s * (1 + spec.amplitude * np.sin(phase))
        kept = times[rng.random(draws) * peak < rate]
        chunks.append(kept)
        have += len(kept)
    return np.concatenate(chunks)[:count]


# Weights are keyed by names: model, tenant, or priority class names.
_Name = TypeVar("_Name", bound=str)


def _weights(mapping: dict[_Name, float]) -> tuple[list[_Name], np.ndarray]:
    names = list(mapping)
    weights = np.array([mapping[n] for n in names], dtype=float)
    return names, weights / weights.sum()


def generate(workload: Workload, seed: int, jobs: int | None = None) -> ArrivalPlan:
    spec = workload.arrivals
    if spec.process == "trace":
        return _from_trace(workload, jobs)
    count = jobs if jobs is not None else workload.jobs
    rng = np.random.default_rng(seed)
    if spec.process == "poisson":
        times = _poisson(rng, spec.rate_per_s, count)
    elif spec.process == "bursty":
        times = _bursty(rng, spec, count)
    else:
        times = _diurnal(rng, spec, count)
    models, model_p = _weights(workload.models)
    priorities, priority_p = _weights(workload.priorities)
    tenants, tenant_p = _weights({t: v.share for t, v in workload.tenants.items()})
    priority_values = np.array([int(Priority[p]) for p in priorities], dtype=np.int8)
    return ArrivalPlan(
        times=times,
        model=rng.choice(len(models), size=count, p=model_p).astype(np.int16),
        priority=priority_values[rng.choice(len(priorities), size=count, p=priority_p)],
        tenant=rng.choice(len(tenants), size=count, p=tenant_p).astype(np.int32),
        models=tuple(models),
        tenants=tuple(tenants),
    )


def _from_trace(workload: Workload, jobs: int | None) -> ArrivalPlan:
    path = workload.arrivals.path
    if path is None:
        raise ScenarioError("workload.arrivals.path: required for process trace")
    rows = sorted(read_trace(Path(path), jobs), key=lambda r: r.t)
    models = list(dict.fromkeys([*workload.models, *(r.model for r in rows)]))
    tenants = list(dict.fromkeys([*workload.tenants, *(r.tenant for r in rows)]))
    model_index = {m: i for i, m in enumerate(models)}
    tenant_index = {t: i for i, t in enumerate(tenants)}
    return ArrivalPlan(
        times=np.array([r.t for r in rows], dtype=float),
        model=np.array([model_index[r.model] for r in rows], dtype=np.int16),
        priority=np.array([int(Priority[r.priority]) for r in rows], dtype=np.int8),
        tenant=np.array([tenant_index[r.tenant] for r in rows], dtype=np.int32),
        models=tuple(models),
        tenants=tuple(tenants),
    )
