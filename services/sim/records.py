"""Per-job outcomes in flat arrays, and the statistics the report is made of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from mediamesh.common.settings import QueueSettings
from mediamesh.scheduler.core.jobs import JobState, Priority
from mediamesh.sim.arrivals import ArrivalPlan

# Outcome codes in `JobRecords.outcome`.
PENDING, SUCCEEDED, FAILED, REJECTED, STOPPED = 0, 1, 2, 3, 4
OUTCOME_OF_STATE = {
    JobState.SUCCEEDED: SUCCEEDED,
    JobState.FAILED: FAILED,
    JobState.CANCELLED: STOPPED,
    JobState.EXPIRED: STOPPED,
}
PERCENTILES = (50, 95, 99)


class JobRecords:
    """One slot per arrival, indexed by the arrival's position in the plan."""

    def __init__(self, plan: ArrivalPlan, modality_of_model: dict[str, str]) -> None:
        n = len(plan)
        self.plan = plan
        self.modalities = tuple(sorted(set(modality_of_model.values())))
        index = {m: i for i, m in enumerate(self.modalities)}
        per_model = np.array(
            [index.get(modality_of_model.get(m, ""), -1) for m in plan.models], dtype=np.int16
        )
        self.modality = per_model[plan.model] if n else np.zeros(0, dtype=np.int16)
        self.first_dispatch = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.outcome = np.zeros(n, dtype=np.int8)
        # How many times each job ended: conservation says exactly once.
        self.ends = np.zeros(n, dtype=np.int32)
        self.preempted = 0

    def end(self, index: int, outcome: int, at: float) -> None:
        self.ends[index] += 1
        self.outcome[index] = outcome
        self.finished[index] = at

    def summary(self, queues: Mapping[str, QueueSettings]) -> dict[str, Any]:
        """SLA attainment and wait/latency percentiles by modality, and by modality x priority.

        Each job is held to its class's SLA in its modality's queue (`class_sla_s`, else the
        queue's); the `sla_s` reported per modality is the queue's own."""
        latency = self.finished - self.plan.times
        wait = self.first_dispatch - self.plan.times
        within = latency <= self.job_slas(queues, missing=float("inf"))
        # A job still pending when the run ends waited, and took, longer than the run: it
        # counts as infinitely late rather than dropping out of the percentiles, which would
        # then describe only the jobs that were lucky enough to run.
        unfinished = self.outcome == PENDING
        wait[unfinished & np.isnan(wait)] = np.inf
        latency[unfinished] = np.inf
        result: dict[str, Any] = {"by_modality": {}, "by_modality_priority": {}}
        for m, modality in enumerate(self.modalities):
            of_modality = self.modality == m
            queue = queues.get(modality)
            sla = queue.sla_s if queue is not None else float("inf")
            result["by_modality"][modality] = _stats(
                of_modality, self.outcome, wait, latency, within, sla
            )
            for priority in Priority:
                mask = of_modality & (self.plan.priority == int(priority))
                if mask.any():
                    key = f"{modality}/{priority.name}"
                    class_sla = queue.sla_for(priority.name) if queue is not None else sla
                    result["by_modality_priority"][key] = _stats(
                        mask, self.outcome, wait, latency, within, class_sla
                    )
        result["total"] = {
            "jobs": len(self.outcome),
            "succeeded": int((self.outcome == SUCCEEDED).sum()),
            "failed": int((self.outcome == FAILED).sum()),
            "rejected": int((self.outcome == REJECTED).sum()),
            "unfinished": int((self.outcome == PENDING).sum()),
            "preempted_runs": self.preempted,
        }
        return result

    def overall(self) -> dict[str, dict[str, float | None]]:
        """Wait and latency percentiles over every job that succeeded."""
        done = self.outcome == SUCCEEDED
        return {
            "wait_s": _percentiles((self.first_dispatch - self.plan.times)[done]),
            "latency_s": _percentiles((self.finished - self.plan.times)[done]),
        }

    def attainment(
        self, queues: Mapping[str, QueueSettings], priorities: set[int] | None = None
    ) -> dict[str, float]:
        """Fraction of each modality's jobs (of these priorities) done within their SLA."""
        within = (self.finished - self.plan.times) <= self.job_slas(queues, missing=0.0)
        out: dict[str, float] = {}
        for m, modality in enumerate(self.modalities):
            mask = self.modality == m
            if priorities:
                mask &= np.isin(self.plan.priority, list(priorities))
            total = int(mask.sum())
            if total:
                met = mask & (self.outcome == SUCCEEDED) & within
                out[modality] = float(met.sum()) / total
        return out

    def job_slas(self, queues: Mapping[str, QueueSettings], missing: float) -> np.ndarray:
        """Each job's latency target: its class's in its modality's queue (`missing` for a
        modality without a queue)."""
        slas = np.full(len(self.outcome), missing)
        for m, modality in enumerate(self.modalities):
            queue = queues.get(modality)
            if queue is None:
                continue
            of_modality = self.modality == m
            for priority in Priority:
                mask = of_modality & (self.plan.priority == int(priority))
                slas[mask] = queue.sla_for(priority.name)
        return slas


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    """p50/p95/p99 of `values` (NaN ignored) by linear interpolation; a percentile whose
    rank reaches an infinite value (a job that never ended) is infinite."""
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return {f"p{p}": None for p in PERCENTILES}
    if np.isfinite(values).all():
        points = np.percentile(values, PERCENTILES)
        return {f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}
    # numpy interpolates inf - x into NaN: rank by hand.
    ordered = np.sort(values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        position = p / 100 * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        fraction = position - low
        if fraction == 0:
            out[f"p{p}"] = float(ordered[low])
        elif np.isinf(ordered[high]):
            out[f"p{p}"] = float("inf")
        else:
            out[f"p{p}"] = float(ordered[low] + (ordered[high] - ordered[low]) * fraction)
    return out


def _stats(
    mask: np.ndarray,
    outcome: np.ndarray,
    wait: np.ndarray,
    latency: np.ndarray,
    within: np.ndarray,
    sla: float,
) -> dict[str, Any]:
    total = int(mask.sum())
    done = mask & (outcome == SUCCEEDED)
    met = done & within
    return {
        "jobs": total,
        "succeeded": int(done.sum()),
        "rejected": int((mask & (outcome == REJECTED)).sum()),
        "unfinished": int((mask & (outcome == PENDING)).sum()),
        "sla_s": sla,
        "sla_attainment": float(met.sum()) / total if total else None,
        "wait_s": _percentiles(wait[mask]),
        # Succeeded jobs, and unfinished ones as infinite: failed and rejected jobs have a
        # latency, but not one of a served job.
        "latency_s": _percentiles(latency[done | (mask & (outcome == PENDING))]),
    }


class LatencyPoints(TypedDict):
    """One modality's latency percentiles by time bin (None: no job finished in the bin)."""

    t: list[float]
    p50: list[float | None]
    p95: list[float | None]


@dataclass
class TimeSeries:
    """Sampled state of the mesh for the over-time plot."""

    t: list[float] = field(default_factory=list)
    depth: dict[str, list[int]] = field(default_factory=dict)
    replicas: dict[str, list[int]] = field(default_factory=dict)
    busy: list[int] = field(default_factory=list)

    def latency_over_time(self, records: JobRecords, bins: int = 100) -> dict[str, LatencyPoints]:
        """p50/p95 latency of the jobs finishing in each time bin, per modality."""
        done = records.outcome == SUCCEEDED
        if not done.any():
            return {}
        finished = records.finished[done]
        latency = finished - records.plan.times[done]
        modality = records.modality[done]
        edges = np.linspace(0.0, float(finished.max()) + 1e-9, bins + 1)
        centres = ((edges[:-1] + edges[1:]) / 2).tolist()
        out: dict[str, LatencyPoints] = {}
        for m, name in enumerate(records.modalities):
            mine = modality == m
            # Sort by bin once, then each bin is a contiguous slice.
            which = np.clip(np.searchsorted(edges, finished[mine], side="right") - 1, 0, bins - 1)
            order = np.argsort(which, kind="stable")
            values, which = latency[mine][order], which[order]
            bounds = np.searchsorted(which, np.arange(bins + 1))
            series: LatencyPoints = {"t": centres, "p50": [], "p95": []}
            for b in range(bins):
                chunk = values[bounds[b] : bounds[b + 1]]
                series["p50"].append(float(np.percentile(chunk, 50)) if len(chunk) else None)
                series["p95"].append(float(np.percentile(chunk, 95)) if len(chunk) else None)
            out[name] = series
        return out
