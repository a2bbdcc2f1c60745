"""The simulation's outputs: a JSON result file and a PNG of the mesh over time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from mediamesh.sim.simulation import SimulationResult

_MAX_SERIES_POINTS = 400


def _bins(result: SimulationResult) -> int:
    """Enough latency bins to show change, few enough that each holds a percentile's worth."""
    return int(min(max(result.jobs / 200, 10), 100))


_Point = TypeVar("_Point")


def _thin(values: list[_Point], step: int) -> list[_Point]:
    return values[::step]


def result_dict(result: SimulationResult) -> dict[str, Any]:
    series = result.series
    step = max(len(series.t) // _MAX_SERIES_POINTS, 1)
    return {
        "scenario": result.scenario,
        "seed": result.seed,
        "jobs": result.jobs,
        "initial_devices": result.devices,
        "simulated_seconds": result.sim_seconds,
        "wall_seconds": result.wall_seconds,
        "jobs_per_wall_second": result.jobs_per_wall_s,
        "sla_s": result.sla_s,
        **result.stats,
        "fleet": {**result.fleet, "cost_per_hour": result.cost_per_hour},
        "scheduler": result.scheduler,
        "over_time": {
            "t": _thin(series.t, step),
            "queue_depth": {q: _thin(v, step) for q, v in series.depth.items()},
            "ready_replicas": {d: _thin(v, step) for d, v in series.replicas.items()},
            "busy_devices": _thin(series.busy, step),
            "latency_s": series.latency_over_time(result.records, _bins(result)),
        },
    }


def write_json(result: SimulationResult, path: Path) -> dict[str, Any]:
    """Writes the result as JSON; returns it with infinite percentiles (unfinished jobs) as
    they are, which the file holds as null: `Infinity` and `NaN` are not JSON, and the row's
    `unfinished` count says why a percentile is missing."""
    data = result_dict(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(data), indent=2, allow_nan=False) + "\n")
    return data


def _finite(value: Any) -> Any:
    """`value` with every infinite or NaN float replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


class PlotUnavailable(RuntimeError):
    """matplotlib, which the `sim` extra installs, is missing."""


def pyplot() -> ModuleType:
    """matplotlib's pyplot on a file-only backend; PlotUnavailable with the install hint when
    the optional `sim` extra is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(
            "plots need matplotlib: pip install 'mediamesh[sim]' (or pass --no-plot)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plot(result: SimulationResult, path: Path) -> None:
    """Queue depth, ready replicas and latency percentiles over simulated time."""
    plt = pyplot()
    series = result.series
    minutes = [t / 60 for t in series.t]
    fig, (depth_ax, replica_ax, latency_ax) = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    for queue, values in series.depth.items():
        depth_ax.plot(minutes, values, label=queue)
    depth_ax.set_ylabel("queued jobs")
    depth_ax.set_title(f"{result.scenario}: {result.jobs:,} jobs")
    depth_ax.legend(loc="upper right")
    for deployment, values in series.replicas.items():
        replica_ax.plot(minutes, values, label=deployment)
    replica_ax.plot(minutes, series.busy, label="busy (all)", color="black", linewidth=0.8)
    replica_ax.set_ylabel("ready replicas")
    replica_ax.legend(loc="upper right", fontsize="small", ncol=2)
    for modality, points in series.latency_over_time(result.records, _bins(result)).items():
        t = [x / 60 for x in points["t"]]
        line = latency_ax.plot(t, points["p95"], label=f"{modality} p95")[0]
        latency_ax.plot(t, points["p50"], linestyle=":", color=line.get_color())
        sla = result.sla_s.get(modality)
        if sla is not None:
            latency_ax.axhline(sla, color=line.get_color(), linewidth=0.6, linestyle="--")
    latency_ax.set_yscale("log")
    latency_ax.set_ylabel("latency s (p95 solid, p50 dotted, SLA dashed)")
    latency_ax.set_xlabel("simulated minutes")
    latency_ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
