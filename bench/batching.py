"""batching: flux-tiny and flux-small through the mesh vs. the pipeline called directly.

The direct run is the limit on this machine: the same pipeline, the same torch thread
count, no gRPC, no queue, at its best batch size. Direct runs go first, while no mesh is
up to compete for the cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.common import ROOT, Options, Result, level, level_from_load, log, run_loadgen
from bench.launcher import MODELS_DIR, public_config

MODELS = ("flux-tiny", "flux-small")
CONCURRENCY = (1, 8, 32, 64)
DIRECT_BATCH_SIZES = (1, 2, 4, 8)
# One worker is one device. Its torch threads (and the direct run's) default to one: on two
# cores the gateway, scheduler and load generator need the other, and a two-thread OpenMP
# pool that loses a core to them or to a neighbour ran 3-20x slower here than one thread.
# Measured requests per level, sized for a few seconds to a minute each on two cores.
MESH_REQUESTS = {
    "flux-tiny": {1: 64, 8: 160, 32: 320, 64: 640},
    "flux-small": {1: 12, 8: 32, 32: 64, 64: 128},
}
DIRECT_REQUESTS = {"flux-tiny": 64, "flux-small": 16}
# The smoke run checks the code paths, not the numbers: one step keeps it to seconds.
SMOKE_PARAMS = {"steps": 1}


def mesh_requests(model: str, concurrency: int, smoke: bool) -> tuple[int, int]:
    """(measured, warm-up) requests of one level."""
    if smoke:
        return 2, 0
    return MESH_REQUESTS[model][concurrency], min(concurrency, 8)


def request_params(smoke: bool) -> dict[str, int]:
    """Fields set on every request, mesh and direct alike; unset fields take the defaults."""
    return SMOKE_PARAMS if smoke else {}


def run_direct(models: list[str], requests: int, smoke: bool, threads: int) -> list[dict[str, Any]]:
    sizes = (1, 2) if smoke else DIRECT_BATCH_SIZES
    argv = [sys.executable, "-m", "bench.direct", "--threads", str(threads)]
    for model in models:
        argv += ["--model", model]
    argv += ["--models-dir", str(MODELS_DIR), "--batch-sizes", ",".join(map(str, sizes))]
    argv += ["--requests", str(requests), "--steps", str(request_params(smoke).get("steps", 0))]
    done = subprocess.run(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"direct run of {models} failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1])["models"]


def direct_reports(smoke: bool, threads: int) -> list[dict[str, Any]]:
    if smoke:
        # One process for both models: importing torch twice is a third of the smoke budget.
        return run_direct(list(MODELS), 2, smoke, threads)
    return [r for m in MODELS for r in run_direct([m], DIRECT_REQUESTS[m], smoke, threads)]


def run(options: Options) -> Result:
    result = Result("batching", options)
    direct: dict[str, dict[str, Any]] = {}
    threads = options.torch_threads
    for report in direct_reports(options.smoke, threads):
        model = report["model"]
        rows = [
            level(
                s["concurrency"],
                s["latencies_ms"],
                s["errors"],
                s["duration_s"],
                path="direct",
                model=model,
                batch_size=s["batch_size"],
            )
            for s in report["sizes"]
        ]
        for row in rows:
            log(_describe(row))
        result.levels += rows
        best = max(rows, key=lambda r: r["throughput_rps"] or 0)
        direct[model] = {"best": best, "params": report["params"]}
    params = request_params(options.smoke)
    workers = [{"models": list(MODELS), "torch_threads": threads}]
    with options.meshes.mesh(workers) as mesh:
        result.config = {
            "models": list(MODELS),
            "concurrency": list(CONCURRENCY),
            "torch_threads": threads,
            "direct_batch_sizes": sorted({r["batch_size"] for r in result.levels}),
            "request_params": {m: direct[m]["params"] for m in MODELS},
            "mesh_requests": {
                m: {str(c): mesh_requests(m, c, options.smoke)[0] for c in CONCURRENCY}
                for m in MODELS
            },
            "direct_requests_per_batch_size": (
                dict.fromkeys(MODELS, 2) if options.smoke else DIRECT_REQUESTS
            ),
            "mesh": public_config(mesh.config),
        }
        for model in MODELS:
            for concurrency in CONCURRENCY:
                requests, warmup = mesh_requests(model, concurrency, options.smoke)
                report = run_loadgen(
                    mesh.gateway,
                    [model],
                    timeout_s=900,
                    concurrency=concurrency,
                    requests=requests,
                    warmup=warmup,
                    params=params or None,
                )
                row = level_from_load(report, path="mesh", model=model)
                best = direct[model]["best"]["throughput_rps"]
                row["ratio_to_direct"] = _ratio(row["throughput_rps"], best)
                log(_describe(row))
                result.levels.append(row)
    result.summary = _summary(result.levels, direct)
    plot(result)
    return result


def _ratio(mesh: float | None, direct: float | None) -> float | None:
    if not mesh or not direct:
        return None
    return round(mesh / direct, 3)


def _summary(levels: list[dict[str, Any]], direct: dict[str, dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for model in MODELS:
        mesh_rows = [r for r in levels if r["model"] == model and r["path"] == "mesh"]
        best_mesh = max(mesh_rows, key=lambda r: r["throughput_rps"] or 0)
        best_direct = direct[model]["best"]
        summary[model] = {
            "direct_best_batch_size": best_direct["batch_size"],
            "direct_best_throughput_rps": best_direct["throughput_rps"],
            "mesh_best_throughput_rps": best_mesh["throughput_rps"],
            "mesh_best_concurrency": best_mesh["concurrency"],
            "best_ratio_mesh_to_direct": _ratio(
                best_mesh["throughput_rps"], best_direct["throughput_rps"]
            ),
            "ratio_by_concurrency": {
                str(r["concurrency"]): r["ratio_to_direct"] for r in mesh_rows
            },
        }
    return summary


def _describe(row: dict[str, Any]) -> str:
    where = f"batch {row['batch_size']}" if row["path"] == "direct" else f"c={row['concurrency']}"
    return (
        f"batching {row['model']} {row['path']} {where}: {row['throughput_rps']} req/s, "
        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {row['errors']}"
    )


def plot(result: Result) -> None:
    fig, axes = plt.subplots(2, len(MODELS), figsize=(12, 7), squeeze=False)
    for column, model in enumerate(MODELS):
        top, bottom = axes[0][column], axes[1][column]
        mesh_rows = [r for r in result.levels if r["model"] == model and r["path"] == "mesh"]
        best = result.summary[model]["direct_best_throughput_rps"] or 0
        xs = [str(r["concurrency"]) for r in mesh_rows]
        top.bar(xs, [r["throughput_rps"] or 0 for r in mesh_rows], label="mesh")
        top.axhline(
            best,
            color="tab:red",
            linestyle="--",
            label=f"direct, batch {result.summary[model]['direct_best_batch_size']}",
        )
        top.set_title(f"{model}: throughput")
        top.set_xlabel("concurrency")
        top.set_ylabel("requests / s")
        top.legend()
        for key, marker in (("p50_ms", "o"), ("p95_ms", "s"), ("p99_ms", "x")):
            bottom.plot(xs, [(r[key] or 0) / 1000 for r in mesh_rows], marker=marker, label=key)
        bottom.set_title(f"{model}: mesh latency")
        bottom.set_xlabel("concurrency")
        bottom.set_ylabel("seconds")
        bottom.legend()
    fig.tight_layout()
    fig.savefig(result.plot_path, dpi=100)
    plt.close(fig)
