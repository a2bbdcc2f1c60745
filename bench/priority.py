"""priority: REALTIME image latency alone, then under a BATCH flood at twice capacity.

Capacity is measured first: the closed-loop throughput of the BATCH image+video mix, long
video jobs included, with enough callers to keep every worker busy. The flood then offers
twice that rate open-loop, so the queue grows for the whole window, and REALTIME flux-tiny
requests run one at a time through it. BATCH completions inside the REALTIME window show
whether BATCH is starved.

The record says how hard the flood really was: the rate offered, the rate the mesh
achieved (BATCH completions per second over the whole flood) and the capacity measured
before. An achieved rate above the capacity means the capacity was measured too low and
the flood was weaker than its label; `flood_offered_over_achieved` is the real overload.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.common import (
    Options,
    Result,
    level,
    level_from_load,
    log,
    run_loadgen,
    start_loadgen,
    stop_loadgen,
)
from bench.launcher import public_config

REALTIME_MODEL = "flux-tiny"
FLOOD_MODELS = ["flux-tiny", "wan-tiny"]
# Long video jobs: a worker running one is busy for many REALTIME step times (what step
# boundary pausing is for). The same mix measures capacity and floods.
FLOOD_MODEL_PARAMS = {"wan-tiny": {"steps": 40}}
# REALTIME's own target in the image queue (`class_sla_s`): an interactive caller's, about
# its latency alone plus a step. A REALTIME image that would wait out a running BATCH batch
# misses it, which is when the scheduler pauses that batch at its next step boundary. The
# queue's own SLA (the default 10 s) stays for the flood's BATCH images.
REALTIME_SLA_S = 0.05
# The local mesh has no spot workers: BATCH must be allowed on on-demand or it never runs.
SCHEDULER: dict[str, Any] = {
    "queues": {
        "image": {"sla_s": 10.0, "class_sla_s": {"REALTIME": REALTIME_SLA_S}},
        "video": {"sla_s": 120.0},
        "audio": {"sla_s": 30.0},
    },
    "placement": {"BATCH": {"prefer": "on-demand", "allow": ["on-demand"]}},
    # REALTIME requests arrive one after another all through a 40-step video batch; with
    # the default of one pause per job the second of them waits the batch out.
    "pause_max_per_job": 8,
}
# Two single-thread workers on two cores, each hosting both flood models.
WORKERS = [{"models": FLOOD_MODELS, "torch_threads": 1} for _ in range(2)]
FLOOD_OVERLOAD = 2.0
# Seconds the flood runs before REALTIME requests start, so they meet a standing queue.
FLOOD_LEAD_S = 3.0


def sizes(smoke: bool) -> dict[str, int]:
    if smoke:
        return {"capacity_concurrency": 4, "capacity_requests": 4, "realtime_requests": 3}
    # Enough requests that the long video jobs do not make the capacity a matter of luck,
    # and REALTIME ones that a p99 is not the second slowest of a hundred (with 100, the
    # ratio of the two p99s swung from 1.7x to 2.8x between runs of unchanged code).
    return {"capacity_concurrency": 32, "capacity_requests": 256, "realtime_requests": 300}


def run(options: Options) -> Result:
    result = Result("priority", options)
    n = sizes(options.smoke)
    with options.meshes.mesh(WORKERS, SCHEDULER) as mesh:
        sla_s = _realtime_sla(mesh.config)
        result.config = {
            "realtime_model": REALTIME_MODEL,
            "flood_models": FLOOD_MODELS,
            "flood_model_params": FLOOD_MODEL_PARAMS,
            "flood_overload": FLOOD_OVERLOAD,
            "flood_lead_s": 0.5 if options.smoke else FLOOD_LEAD_S,
            **n,
            "mesh": public_config(mesh.config),
        }
        capacity_report = run_loadgen(
            mesh.gateway,
            FLOOD_MODELS,
            timeout_s=900,
            concurrency=n["capacity_concurrency"],
            requests=n["capacity_requests"],
            warmup=min(n["capacity_concurrency"], 16),
            priority="BATCH",
            model_params=FLOOD_MODEL_PARAMS,
        )
        capacity = level_from_load(capacity_report, phase="capacity", priority="BATCH")
        log(_describe(capacity))
        alone = level_from_load(_realtime(mesh.gateway, n["realtime_requests"]), phase="alone")
        log(_describe(alone))
        rate = max(FLOOD_OVERLOAD * (capacity["throughput_rps"] or 1.0), 0.5)
        flood = start_loadgen(
            mesh.gateway,
            FLOOD_MODELS,
            mode="open",
            rate=rate,
            priority="BATCH",
            max_seconds=900,
            model_params=FLOOD_MODEL_PARAMS,
        )
        try:
            time.sleep(result.config["flood_lead_s"])
            loaded_report = _realtime(mesh.gateway, n["realtime_requests"])
        finally:
            flood_report = stop_loadgen(flood)
        loaded = level_from_load(loaded_report, phase="under_flood")
        log(_describe(loaded))
        batch = _flood_level(flood_report, loaded_report["started"], loaded_report["ended"])
        log(_describe(batch))
        pauses = _paused_jobs(mesh.config["scheduler"]["metrics_port"])
    result.levels = [capacity, alone, loaded, batch]
    achieved = _achieved_rps(flood_report)
    result.summary = {
        "capacity_rps": capacity["throughput_rps"],
        "flood_offered_rps": round(rate, 3),
        "flood_achieved_rps": achieved,
        "flood_offered_over_capacity": _ratio(rate, capacity["throughput_rps"]),
        "flood_offered_over_achieved": _ratio(rate, achieved),
        "realtime_p99_flood_over_alone": _ratio(loaded["p99_ms"], alone["p99_ms"]),
        "realtime_sla_s": sla_s,
        "realtime_p99_ms_alone": alone["p99_ms"],
        "realtime_p99_ms_under_flood": loaded["p99_ms"],
        "realtime_within_sla": loaded["p99_ms"] is not None and loaded["p99_ms"] <= sla_s * 1000,
        "batch_throughput_rps_during_flood": batch["throughput_rps"],
        "batch_starved": not batch["throughput_rps"],
        "batch_completed_by_model": batch["completed_by_model"],
        "batch_jobs_paused": pauses,
    }
    plot(result, loaded_report, flood_report)
    return result


def _achieved_rps(flood: dict[str, Any]) -> float | None:
    """BATCH requests the mesh completed per second over the whole flood."""
    done = sum(1 for f in flood["finished"] if f[2] and f[1] <= flood["ended"])
    duration = flood["ended"] - flood["started"]
    return round(done / duration, 3) if duration > 0 else None


def _paused_jobs(metrics_port: int) -> float:
    """BATCH jobs whose batch was paused for more urgent work (mediamesh_pauses_total)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    prefix = 'mediamesh_pauses_total{priority="BATCH"}'
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def _realtime(gateway: str, requests: int) -> dict[str, Any]:
    return run_loadgen(
        gateway,
        [REALTIME_MODEL],
        timeout_s=900,
        concurrency=1,
        requests=requests,
        warmup=1,
        priority="REALTIME",
    )


def _flood_level(report: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    """BATCH work finished while REALTIME requests were being measured."""
    inside = [f for f in report["finished"] if start <= f[1] <= end]
    latencies = [(f[1] - f[0]) * 1000 for f in inside if f[2]]
    by_model: dict[str, int] = {}
    for f in inside:
        if f[2]:
            by_model[f[3]] = by_model.get(f[3], 0) + 1
    return level(
        None,  # open loop: no fixed number of callers
        latencies,
        sum(1 for f in inside if not f[2]),
        end - start,
        phase="flood",
        priority="BATCH",
        mode="open",
        offered_rps=report["rate"],
        issued=report["issued"],
        unfinished_at_stop=report["unfinished"],
        completed_by_model=by_model,
        error_codes=report["error_codes"],
    )


def _realtime_sla(config: dict[str, Any]) -> float:
    """The REALTIME class's latency target in the image queue, as the mesh was given it."""
    image = (config["scheduler"].get("queues") or {}).get("image", {})
    return float((image.get("class_sla_s") or {}).get("REALTIME", image.get("sla_s", 10.0)))


def _describe(row: dict[str, Any]) -> str:
    return (
        f"priority {row['phase']}: {row['requests']} requests, {row['throughput_rps']} req/s, "
        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {row['errors']}"
    )


def plot(result: Result, realtime: dict[str, Any], flood: dict[str, Any]) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    sla_ms = result.summary["realtime_sla_s"] * 1000
    rows = [r for r in result.levels if r["phase"] in ("alone", "under_flood")]
    labels = [r["phase"] for r in rows]
    for key, marker in (("p50_ms", "o"), ("p95_ms", "s"), ("p99_ms", "x")):
        left.plot(labels, [r[key] or 0 for r in rows], marker=marker, label=key)
    left.axhline(sla_ms, color="tab:red", linestyle="--", label="REALTIME SLA")
    left.set_yscale("log")
    left.set_ylabel("REALTIME latency (ms)")
    left.set_title(f"REALTIME {REALTIME_MODEL}")
    left.legend()
    origin = flood["started"]
    for model in FLOOD_MODELS:
        done = [f for f in flood["finished"] if f[2] and f[3] == model]
        right.scatter([f[1] - origin for f in done], [f[1] - f[0] for f in done], s=6, label=model)
    right.axvspan(
        realtime["started"] - origin, realtime["ended"] - origin, alpha=0.15, label="REALTIME run"
    )
    right.set_xlabel("seconds since the flood started")
    right.set_ylabel("BATCH latency (s), by completion time")
    right.set_title(f"BATCH flood at {result.summary['flood_offered_rps']} req/s")
    right.legend()
    fig.tight_layout()
    fig.savefig(result.plot_path, dpi=100)
    plt.close(fig)
