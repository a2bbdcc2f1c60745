"""batching: flux-tiny and flux-small through the mesh vs. the pipeline called directly.

The direct run is the limit on this machine: the same pipeline in one process, no gRPC, no
queue, at its best batch size and thread count. Direct runs go first, while no mesh is up to
compete for the cores. The mesh runs in two layouts of the same two cores: one worker with
two torch threads, and two workers with one thread each. Clients speak KServe v2, as the
clients people compare us with do.

The c=1 target compares the mesh with the direct batch of 1, and this machine's speed
drifts by a third within minutes; so right after each layout's c=1 level, batch 1 runs
directly once more at that layout's thread count, beside the idle mesh (`direct-beside`
rows), and the c=1 figures compare those two. For the same reason the throughput target
is also measured in paired rounds: after each layout's sweep of a model, the direct best
(the batch size and thread count that won the first pass) and the mesh at c=32 run back to
back, `PAIRED_ROUNDS` times (`direct-paired` and `mesh-paired` rows). Each round's ratio
compares two levels a few seconds apart; the first pass's ratio compares the mesh with the
best of ten levels measured minutes before it, which keeps the luckiest of them.

Every direct level runs in one `bench.direct --serve` process kept for the whole run
(`bench.direct_session`), so a level between mesh levels costs no torch start.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.common import (
    Options,
    Result,
    batch_totals,
    level,
    level_from_load,
    log,
    run_loadgen,
)
from bench.direct_session import DirectSession
from bench.launcher import MODELS_DIR, public_config

MODELS = ("flux-tiny", "flux-small")
CONCURRENCY = (1, 8, 32, 64)
DIRECT_BATCH_SIZES = {"flux-tiny": (1, 2, 4, 8, 16), "flux-small": (1, 2, 4, 8)}
DIRECT_THREADS = (1, 2)
# The shipped flux-tiny batches at most 4; here it may take 16 with a 10 ms window, the
# setting of the real-time, high-QPS case.
BATCHING = {"flux-tiny": {"mode": "dynamic", "max_batch": 16, "max_wait_ms": 10}}
LAYOUTS: dict[str, list[dict[str, Any]]] = {
    "one-worker-2-threads": [{"torch_threads": 2}],
    "two-workers-1-thread": [{"torch_threads": 1}, {"torch_threads": 1}],
}
API = "kserve"
# Measured requests per level, sized for a few seconds to a minute each on two cores.
MESH_REQUESTS = {
    "flux-tiny": {1: 200, 8: 160, 32: 640, 64: 640},
    "flux-small": {1: 12, 8: 32, 32: 64, 64: 128},
}
DIRECT_REQUESTS = {"flux-tiny": 64, "flux-small": 16}
# At least this many batches per direct level: flux-tiny's batch 16 used to be four batches,
# 0.3 s, and the best of ten such short levels kept each run's luckiest moment as the bound.
DIRECT_MIN_BATCHES = {"flux-tiny": 16, "flux-small": 8}
# Rounds of (direct best, mesh at c=32) after each layout's sweep of a model.
PAIRED_ROUNDS = 3
PAIRED_CONCURRENCY = 32
# The smoke run checks the code paths, not the numbers: one step keeps it to seconds.
SMOKE_PARAMS = {"steps": 1}


# Warm-up requests of the c=1 level, the first after the mesh starts: in three fresh meshes
# flux-tiny's c=1 p50 read 23.6-31.0 ms over the first 64 requests and 21.8-23.1 ms over 300
# after 20 more.
C1_WARMUP = {"flux-tiny": 20, "flux-small": 4}


def mesh_requests(model: str, concurrency: int, smoke: bool) -> tuple[int, int]:
    """(measured, warm-up) requests of one level."""
    if smoke:
        return 2, 0
    warmup = C1_WARMUP[model] if concurrency == 1 else min(concurrency, 8)
    return MESH_REQUESTS[model][concurrency], warmup


def mesh_level(gateway: str, model: str, concurrency: int, smoke: bool) -> dict[str, Any]:
    """One closed-loop level of `model` through the mesh, KServe clients."""
    requests, warmup = mesh_requests(model, concurrency, smoke)
    return run_loadgen(
        gateway,
        [model],
        timeout_s=900,
        api=API,
        concurrency=concurrency,
        requests=requests,
        warmup=warmup,
        params=request_params(smoke) or None,
    )


def request_params(smoke: bool) -> dict[str, int]:
    """Fields set on every request, mesh and direct alike; unset fields take the defaults."""
    return SMOKE_PARAMS if smoke else {}


def bench_registry(folder: Path) -> Path:
    """The shipped registry with this benchmark's batching settings."""
    shipped = resources.files("mediamesh.common.defaults").joinpath("models.yaml").read_text()
    registry = yaml.safe_load(shipped)
    for entry in registry["models"]:
        if entry["name"] in BATCHING:
            entry["batching"] = BATCHING[entry["name"]]
    path = folder / "models.yaml"
    path.write_text(yaml.safe_dump(registry, sort_keys=False))
    return path


def direct_reports(direct: DirectSession, smoke: bool) -> list[dict[str, Any]]:
    """The first pass: every batch size at each thread count, before any mesh starts."""
    if smoke:
        return [direct.measure(m, 1, (1, 2), 2, steps=_steps(smoke)) for m in MODELS]
    return [
        direct.measure(
            m,
            threads,
            DIRECT_BATCH_SIZES[m],
            DIRECT_REQUESTS[m],
            min_batches=DIRECT_MIN_BATCHES[m],
            steps=_steps(smoke),
        )
        for threads in DIRECT_THREADS
        for m in MODELS
    ]


def _steps(smoke: bool) -> int:
    """The steps every direct level runs (0: the model's default), as the mesh requests do."""
    return int(request_params(smoke).get("steps", 0))


def _direct_row(report: dict[str, Any], path: str, **fields: Any) -> dict[str, Any]:
    (size,) = report["sizes"]
    return level(
        size["concurrency"],
        size["latencies_ms"],
        size["errors"],
        size["duration_s"],
        path=path,
        model=report["model"],
        batch_size=size["batch_size"],
        threads=report["threads"],
        **fields,
    )


def cpu_snapshot(mesh: Any) -> dict[str, float]:
    """CPU seconds so far: the mesh's processes by role, and this process's waited-for
    children (the load generators, which `run_loadgen` runs to completion)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {**mesh.cpu_seconds(), "loadgen": children.ru_utime + children.ru_stime}


def cpu_per_request(mesh: Any, before: dict[str, float], served: int) -> dict[str, float]:
    """Milliseconds of CPU per request served (warm-up included) by each role since
    `before`: where a level's CPU went on a machine the mesh shares with the model. The
    kernel counts CPU time in 10 ms ticks, so a level of a few requests reads coarsely."""
    after = cpu_snapshot(mesh)
    return {role: round(1000 * (after[role] - before[role]) / served, 3) for role in after}


def run(options: Options) -> Result:
    result = Result("batching", options)
    with DirectSession(MODELS_DIR) as direct:
        _run(options, result, direct)
    result.summary = _summary(result.levels)
    plot(result)
    return result


def _run(options: Options, result: Result, direct: DirectSession) -> None:
    for report in direct_reports(direct, options.smoke):
        for s in report["sizes"]:
            row = level(
                s["concurrency"],
                s["latencies_ms"],
                s["errors"],
                s["duration_s"],
                path="direct",
                model=report["model"],
                batch_size=s["batch_size"],
                threads=report["threads"],
            )
            log(_describe(row))
            result.levels.append(row)
    params = request_params(options.smoke)
    layouts: dict[str, list[dict[str, Any]]] = (
        {"shared-smoke-mesh": [{}]} if options.smoke else LAYOUTS
    )
    with tempfile.TemporaryDirectory(prefix="mediamesh-batching-") as scratch:
        registry = str(bench_registry(Path(scratch)))
        configs: dict[str, Any] = {}
        for layout, overrides in layouts.items():
            workers = [{"models": list(MODELS), **w} for w in overrides]
            with options.meshes.mesh(workers, registry_path=registry) as mesh:
                configs[layout] = public_config(mesh.config)
                metrics_port = mesh.config["scheduler"]["metrics_port"]
                for model in MODELS:
                    for concurrency in CONCURRENCY:
                        before = batch_totals(metrics_port, model)
                        cpu_before = cpu_snapshot(mesh)
                        report = mesh_level(mesh.gateway, model, concurrency, options.smoke)
                        jobs, batches = (
                            a - b
                            for a, b in zip(batch_totals(metrics_port, model), before, strict=True)
                        )
                        row = level_from_load(report, path="mesh", model=model, layout=layout)
                        row["mean_batch"] = round(jobs / batches, 2) if batches else None
                        served = sum(mesh_requests(model, concurrency, options.smoke))
                        row["cpu_ms_per_request"] = cpu_per_request(mesh, cpu_before, served)
                        log(_describe(row))
                        result.levels.append(row)
                        # The smoke run measures one model beside its mesh: the code path,
                        # not the figures, at the cost of one more torch start.
                        if concurrency == 1 and (not options.smoke or model == MODELS[0]):
                            beside = _direct_beside(direct, model, layout, overrides, options.smoke)
                            log(_describe(beside))
                            result.levels.append(beside)
                    for row in _paired_rounds(
                        direct, mesh.gateway, model, layout, result.levels, options.smoke
                    ):
                        log(_describe(row))
                        result.levels.append(row)
    result.config = {
        "models": list(MODELS),
        "api": API,
        "concurrency": list(CONCURRENCY),
        "batching": BATCHING,
        "direct_threads": list(DIRECT_THREADS),
        "direct_batch_sizes": {m: list(v) for m, v in DIRECT_BATCH_SIZES.items()},
        "mesh_requests": {
            m: {str(c): mesh_requests(m, c, options.smoke)[0] for c in CONCURRENCY} for m in MODELS
        },
        "direct_requests_per_batch_size": (
            dict.fromkeys(MODELS, 2) if options.smoke else DIRECT_REQUESTS
        ),
        "direct_min_batches": dict.fromkeys(MODELS, 1) if options.smoke else DIRECT_MIN_BATCHES,
        "request_params": params,
        "paired_rounds": paired_rounds(options.smoke),
        "layouts": {name: c["workers"] for name, c in configs.items()},
        "mesh": next(iter(configs.values())),
    }


def _direct_beside(
    direct: DirectSession, model: str, layout: str, workers: list[dict[str, Any]], smoke: bool
) -> dict[str, Any]:
    """Batch 1 called directly at the layout's thread count, with its mesh up and idle."""
    threads = max(int(w.get("torch_threads", 1)) for w in workers)
    requests = 2 if smoke else DIRECT_REQUESTS[model]
    report = direct.measure(model, threads, (1,), requests, steps=_steps(smoke))
    return _direct_row(report, "direct-beside", layout=layout)


def paired_rounds(smoke: bool) -> int:
    return 1 if smoke else PAIRED_ROUNDS


def _paired_rounds(
    direct: DirectSession,
    gateway: str,
    model: str,
    layout: str,
    levels: list[dict[str, Any]],
    smoke: bool,
) -> list[dict[str, Any]]:
    """The direct best and the mesh at c=32, back to back, `paired_rounds` times."""
    best = _direct_best(levels, model)
    rows = []
    for index in range(paired_rounds(smoke)):
        report = direct.measure(
            model,
            best["threads"],
            (best["batch_size"],),
            2 if smoke else DIRECT_REQUESTS[model],
            min_batches=1 if smoke else DIRECT_MIN_BATCHES[model],
            steps=_steps(smoke),
        )
        rows.append(_direct_row(report, "direct-paired", layout=layout, round=index))
        load = mesh_level(gateway, model, PAIRED_CONCURRENCY, smoke)
        rows.append(
            level_from_load(load, path="mesh-paired", model=model, layout=layout, round=index)
        )
    return rows


def _direct_best(levels: list[dict[str, Any]], model: str) -> dict[str, Any]:
    direct = [r for r in levels if r["model"] == model and r["path"] == "direct"]
    return max(direct, key=lambda r: r["throughput_rps"] or 0)


def _ratio(mesh: float | None, direct: float | None) -> float | None:
    if not mesh or not direct:
        return None
    return round(mesh / direct, 3)


def _summary(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model: the direct limit, and per layout the targets' figures (c=32 throughput
    against the direct best, mean batch at c=32, c=1 p50 over the direct batch-1 p50 at
    the worker's thread count, measured beside the mesh when it was)."""
    summary: dict[str, Any] = {}
    for model in MODELS:
        direct = [r for r in levels if r["model"] == model and r["path"] == "direct"]
        best = _direct_best(levels, model)
        entry: dict[str, Any] = {
            "direct_best_throughput_rps": best["throughput_rps"],
            "direct_best_batch_size": best["batch_size"],
            "direct_best_threads": best["threads"],
        }
        for layout in dict.fromkeys(r["layout"] for r in levels if r["path"] == "mesh"):
            rows = {
                r["concurrency"]: r
                for r in levels
                if r["model"] == model and r["path"] == "mesh" and r["layout"] == layout
            }
            threads = 2 if layout == "one-worker-2-threads" else 1
            first = [r for r in direct if r["batch_size"] == 1 and r["threads"] == threads]
            beside = [
                r
                for r in levels
                if r["path"] == "direct-beside" and r["model"] == model and r["layout"] == layout
            ]
            alone = beside or first
            alone_p50 = alone[0]["p50_ms"] if alone else None
            c1 = rows[1]["p50_ms"]
            top = max(rows.values(), key=lambda r: r["throughput_rps"] or 0)
            entry[layout] = {
                "c32_throughput_rps": rows[32]["throughput_rps"],
                "c32_ratio_to_direct_best": _ratio(
                    rows[32]["throughput_rps"], best["throughput_rps"]
                ),
                "best_ratio_to_direct_best": _ratio(top["throughput_rps"], best["throughput_rps"]),
                "c32_mean_batch": rows[32]["mean_batch"],
                # The machine's CPU per image at c=32, by process: the model's share is the
                # workers'; the rest is the mesh's and the client's, on the same two cores.
                "c32_cpu_ms_per_request": rows[32].get("cpu_ms_per_request"),
                "c32_p50_ms": rows[32]["p50_ms"],
                "c32_p99_ms": rows[32]["p99_ms"],
                "c1_p50_ms": c1,
                "direct_batch1_p50_ms": alone_p50,
                "direct_batch1_p50_ms_before_meshes": first[0]["p50_ms"] if first else None,
                "c1_p50_over_direct_ms": (
                    round(c1 - alone_p50, 3) if c1 is not None and alone_p50 else None
                ),
                **_paired_summary(levels, model, layout),
            }
        summary[model] = entry
    return summary


def _paired_summary(levels: list[dict[str, Any]], model: str, layout: str) -> dict[str, Any]:
    """Each round's c=32 throughput over the direct best run just before it, and their
    median: the ratio least moved by the machine's drift."""
    rounds: dict[int, dict[str, Any]] = {}
    for r in levels:
        if r["model"] == model and r.get("layout") == layout and "round" in r:
            rounds.setdefault(r["round"], {})[r["path"]] = r
    ratios = [
        _ratio(pair["mesh-paired"]["throughput_rps"], pair["direct-paired"]["throughput_rps"])
        for _, pair in sorted(rounds.items())
        if "mesh-paired" in pair and "direct-paired" in pair
    ]
    known = [r for r in ratios if r is not None]
    return {
        "c32_paired_ratios": ratios,
        "c32_paired_ratio_median": round(statistics.median(known), 3) if known else None,
    }


def _describe(row: dict[str, Any]) -> str:
    if row["path"] == "direct":
        where = f"direct batch {row['batch_size']}, {row['threads']} thread(s)"
    elif row["path"] == "direct-beside":
        where = f"direct batch 1 beside {row['layout']}, {row['threads']} thread(s)"
    elif row["path"] == "direct-paired":
        where = (
            f"direct batch {row['batch_size']}, {row['threads']} thread(s), "
            f"round {row['round']} beside {row['layout']}"
        )
    elif row["path"] == "mesh-paired":
        where = f"{row['layout']} c={row['concurrency']}, round {row['round']}"
    else:
        where = f"{row['layout']} c={row['concurrency']} (mean batch {row['mean_batch']})"
    return (
        f"batching {row['model']} {where}: {row['throughput_rps']} req/s, "
        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {row['errors']}"
    )


def plot(result: Result) -> None:
    """Per model: throughput by concurrency for each layout against the direct best, and
    the mean batch the scheduler formed."""
    fig, axes = plt.subplots(2, len(MODELS), figsize=(12, 7), squeeze=False)
    for column, model in enumerate(MODELS):
        top, bottom = axes[0][column], axes[1][column]
        mesh_rows = [r for r in result.levels if r["model"] == model and r["path"] == "mesh"]
        layouts = list(dict.fromkeys(r["layout"] for r in mesh_rows))
        width = 0.8 / max(1, len(layouts))
        for index, layout in enumerate(layouts):
            rows = [r for r in mesh_rows if r["layout"] == layout]
            xs = [i + index * width for i in range(len(rows))]
            top.bar(xs, [r["throughput_rps"] or 0 for r in rows], width, label=layout)
            bottom.plot(
                [str(r["concurrency"]) for r in rows],
                [r["mean_batch"] or 0 for r in rows],
                marker="o",
                label=layout,
            )
        ticks = [r["concurrency"] for r in mesh_rows if r["layout"] == layouts[0]]
        top.set_xticks([i + width * (len(layouts) - 1) / 2 for i in range(len(ticks))])
        top.set_xticklabels([str(c) for c in ticks])
        summary = result.summary[model]
        top.axhline(
            summary["direct_best_throughput_rps"] or 0,
            color="tab:red",
            linestyle="--",
            label=(
                f"direct, batch {summary['direct_best_batch_size']}, "
                f"{summary['direct_best_threads']} thread(s)"
            ),
        )
        top.set_title(f"{model}: throughput")
        top.set_xlabel("concurrency")
        top.set_ylabel("requests / s")
        top.legend(fontsize="small")
        bottom.set_title(f"{model}: mean batch formed")
        bottom.set_xlabel("concurrency")
        bottom.set_ylabel("jobs per batch")
        bottom.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(result.plot_path, dpi=100)
    plt.close(fig)
