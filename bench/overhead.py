"""overhead: the `echo` model (no compute) through gateway → scheduler → worker and back.

What is left is the mesh itself: gRPC hops, queueing, batching waits, persistence and
progress streaming. Measured through the native Generate stream, KServe v2 ModelInfer, and
OpenAI's images.generate over the gateway's HTTP face.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.common import Options, Result, level_from_load, log, run_loadgen
from bench.launcher import public_config

CONCURRENCY = (1, 16, 64)
WORKERS = [{"models": ["echo"], "torch_threads": 1}, {"models": ["echo"], "torch_threads": 1}]


def requests_for(concurrency: int, smoke: bool) -> tuple[int, int]:
    """(measured, warm-up) requests of one level.

    At least 100 warm-up requests, and 1000 measured at c=1: the first level runs just after
    the mesh starts, and 100 requests after 2 of warm-up read its p50 at 4.4-5.1 ms where
    the same mesh reads 3.2-3.4 ms a thousand requests on (`bench.profile_mesh`)."""
    if smoke:
        return max(8, concurrency), min(concurrency, 8)
    measured = {1: 1000, 16: 1000, 64: 2000}.get(concurrency, 30 * concurrency)
    return measured, max(2 * concurrency, 100)


def kserve_available() -> bool:
    return importlib.util.find_spec("mediamesh.gateway.api.kserve") is not None


def run(options: Options) -> Result:
    result = Result("overhead", options)
    apis = ["native", "kserve", "openai"] if kserve_available() else ["native", "openai"]
    with options.meshes.mesh(WORKERS) as mesh:
        result.config = {
            "model": "echo",
            "apis": apis,
            "concurrency": list(CONCURRENCY),
            "requests": {str(c): requests_for(c, options.smoke)[0] for c in CONCURRENCY},
            "mesh": public_config(mesh.config),
        }
        for api in apis:
            for concurrency in CONCURRENCY:
                requests, warmup = requests_for(concurrency, options.smoke)
                report = run_loadgen(
                    mesh.http if api == "openai" else mesh.gateway,
                    ["echo"],
                    timeout_s=600,
                    api=api,
                    concurrency=concurrency,
                    requests=requests,
                    warmup=warmup,
                    timeout=60,
                )
                entry = level_from_load(report, api=api, model="echo")
                log(_describe(entry))
                result.levels.append(entry)
    if "kserve" not in apis:
        result.summary["kserve"] = {"skipped": "kserve servicer not present"}
    else:
        unimplemented = [
            e for e in result.levels if e["api"] == "kserve" and "UNIMPLEMENTED" in e["error_codes"]
        ]
        if unimplemented:
            result.summary["kserve"] = {"skipped": "kserve servicer not present (UNIMPLEMENTED)"}
    for api in apis:
        at_one = next(e for e in result.levels if e["api"] == api and e["concurrency"] == 1)
        result.summary[api] = {
            "p50_ms_at_1": at_one["p50_ms"],
            "p99_ms_at_1": at_one["p99_ms"],
            "throughput_rps": {
                str(e["concurrency"]): e["throughput_rps"] for e in result.levels if e["api"] == api
            },
        }
    plot(result)
    return result


def _describe(entry: dict[str, Any]) -> str:
    return (
        f"overhead {entry['api']} c={entry['concurrency']}: {entry['throughput_rps']} req/s, "
        f"p50 {entry['p50_ms']} ms, p99 {entry['p99_ms']} ms, errors {entry['errors']}"
    )


def plot(result: Result) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    apis = list(dict.fromkeys(e["api"] for e in result.levels))
    width = 0.8 / max(len(apis), 1)
    for offset, api in enumerate(apis):
        rows = [e for e in result.levels if e["api"] == api]
        xs = [i + offset * width for i in range(len(rows))]
        left.bar(xs, [e["throughput_rps"] or 0 for e in rows], width, label=api)
        right.plot(
            [str(e["concurrency"]) for e in rows],
            [e["p50_ms"] or 0 for e in rows],
            marker="o",
            label=f"{api} p50",
        )
        right.plot(
            [str(e["concurrency"]) for e in rows],
            [e["p99_ms"] or 0 for e in rows],
            marker="x",
            linestyle="--",
            label=f"{api} p99",
        )
    left.set_xticks([i + width * (len(apis) - 1) / 2 for i in range(len(CONCURRENCY))])
    left.set_xticklabels([str(c) for c in CONCURRENCY])
    left.set_xlabel("concurrency")
    left.set_ylabel("requests / s")
    left.set_title("echo throughput through the mesh")
    left.legend()
    right.set_xlabel("concurrency")
    right.set_yscale("log")
    right.set_ylabel("latency (ms)")
    right.set_title("echo latency")
    right.legend()
    fig.tight_layout()
    fig.savefig(result.plot_path, dpi=100)
    plt.close(fig)
