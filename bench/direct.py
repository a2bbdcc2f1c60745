"""The baseline: a pipeline called directly in one process, no gRPC, no queue; prints JSON.

The model is loaded as a worker loads it (`load_host`) and `run_batch` runs in one thread,
as on a worker's device thread. Each batch size runs the same number of requests as
back-to-back batches; a request's latency is its batch's wall time, which is what a caller
holding `batch_size` requests at once would see.

    python -m bench.direct --model flux-tiny --threads 2 --batch-sizes 1,2,4,8 --requests 16

`--min-batches N` runs at least N batches of each size, so that a big batch size is measured
over as long a time as a small one rather than over a few batches.

`--serve` keeps the process and its loaded models for a whole benchmark: it reads one
level per stdin line (JSON: model, threads, batch_sizes, requests, min_batches, steps) and
answers each with one stdout line in the shape above (`bench.direct_session` drives it).
This machine's speed drifts by a third within minutes, so a baseline is only comparable
with the mesh level measured next to it, and a torch start per such level would cost more
than the level itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec, Registry, load_registry
from mediamesh.common.work import JobFailed, JobFinished, JobParams, WorkerEvent
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.host import ModelHost


def jobs_for(spec: ModelSpec, first: int, count: int, steps: int = 0) -> list[JobParams]:
    """Jobs with the model's defaults, as the scheduler fills in an unset request."""
    d = spec.defaults
    return [
        JobParams(
            job_id=f"direct-{first + i}",
            generation=GenerationParams(
                prompt=f"bench {first + i}",
                steps=steps or d.steps,
                seed=first + i,
                width=d.width,
                height=d.height,
                num_frames=d.num_frames,
                guidance_scale=d.guidance_scale,
                duration_s=d.duration_s,
            ),
        )
        for i in range(count)
    ]


def run_one_batch(
    host: ModelHost, device: ThreadPoolExecutor, jobs: list[JobParams]
) -> tuple[float, int]:
    """(wall seconds, failed jobs) of one batch on the device thread."""
    events: list[WorkerEvent] = []
    control = BatchControl([j.job_id for j in jobs])
    started = time.perf_counter()
    device.submit(host.run_batch, jobs, control, events.append).result()
    elapsed = time.perf_counter() - started
    finished = sum(isinstance(e, JobFinished) for e in events)
    failed = sum(isinstance(e, JobFailed) for e in events)
    return elapsed, failed + (len(jobs) - finished - failed)


def measure(
    host: ModelHost, spec: ModelSpec, batch_size: int, requests: int, steps: int, min_batches: int
) -> dict:
    batches = max(1, min_batches, math.ceil(requests / batch_size))
    latencies_ms: list[float] = []
    errors = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="device") as device:
        started = time.perf_counter()
        for index in range(batches):
            elapsed, failed = run_one_batch(
                host, device, jobs_for(spec, index * batch_size, batch_size, steps)
            )
            errors += failed
            latencies_ms += [round(elapsed * 1000.0, 3)] * (batch_size - failed)
        duration = time.perf_counter() - started
    return {
        "batch_size": batch_size,
        "concurrency": batch_size,
        "requests": batches * batch_size,
        "errors": errors,
        "duration_s": duration,
        "latencies_ms": latencies_ms,
    }


def warm_up(host: ModelHost, spec: ModelSpec, steps: int) -> None:
    """One batch outside any level: the first call pays one-off costs (allocator, kernel
    selection) that no level should."""
    with ThreadPoolExecutor(max_workers=1) as device:
        run_one_batch(host, device, jobs_for(spec, 10_000, 1, steps))


def model_report(spec: ModelSpec, sizes: list[dict], steps: int, threads: int) -> dict[str, Any]:
    defaults = spec.defaults.model_dump()
    if steps:
        defaults["steps"] = steps
    return {"model": spec.name, "params": defaults, "threads": threads, "sizes": sizes}


def run_model(
    spec: ModelSpec,
    models_dir: Path,
    sizes: list[int],
    requests: int,
    steps: int,
    min_batches: int = 1,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="mediamesh-direct-") as checkpoints:
        host = load_host(
            spec, models_dir=models_dir, device="cpu", checkpoint_dir=Path(checkpoints)
        )
        warm_up(host, spec, steps)
        results = [measure(host, spec, size, requests, steps, min_batches) for size in sizes]
        host.close()
    return model_report(spec, results, steps, torch.get_num_threads())


def serve(models_dir: Path, commands: TextIO, replies: TextIO) -> None:
    """Levels on request until `commands` ends; each model loads once, and is warmed again
    the first time it runs at a thread count (the pool's first use at that size)."""
    registry = load_registry()
    hosts: dict[str, ModelHost] = {}
    warmed: set[tuple[str, int, int]] = set()
    with tempfile.TemporaryDirectory(prefix="mediamesh-direct-") as checkpoints:
        try:
            for line in commands:
                if not line.strip():
                    continue
                try:
                    reply = _serve_one(
                        json.loads(line), registry, models_dir, Path(checkpoints), hosts, warmed
                    )
                except Exception as exc:  # the client shows it; the next level may still run
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                replies.write(json.dumps(reply) + "\n")
                replies.flush()
        finally:
            for host in hosts.values():
                host.close()


def _serve_one(
    command: dict[str, Any],
    registry: Registry,
    models_dir: Path,
    checkpoints: Path,
    hosts: dict[str, ModelHost],
    warmed: set[tuple[str, int, int]],
) -> dict[str, Any]:
    spec = registry.get(command["model"])
    if spec is None:
        raise ValueError(f"unknown model {command['model']!r}")
    steps = int(command.get("steps", 0))
    # Each level's device thread is new, and a new thread takes the pool size set here.
    torch.set_num_threads(int(command["threads"]))
    host = hosts.get(spec.name)
    if host is None:
        host = hosts[spec.name] = load_host(
            spec, models_dir=models_dir, device="cpu", checkpoint_dir=checkpoints
        )
    if (spec.name, torch.get_num_threads(), steps) not in warmed:
        warm_up(host, spec, steps)
        warmed.add((spec.name, torch.get_num_threads(), steps))
    requests = int(command["requests"])
    min_batches = int(command.get("min_batches", 1))
    sizes = [
        measure(host, spec, int(size), requests, steps, min_batches)
        for size in command["batch_sizes"]
    ]
    return model_report(spec, sizes, steps, torch.get_num_threads())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.direct", description=__doc__)
    parser.add_argument("--model", action="append", default=[], help="repeat for more")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--batch-sizes", default="1,2,4,8")
    parser.add_argument("--requests", type=int, default=16, help="per batch size")
    parser.add_argument(
        "--min-batches",
        type=int,
        default=1,
        help="at least this many batches per size (big batches then run more requests)",
    )
    parser.add_argument("--steps", type=int, default=0, help="0: the model's default")
    parser.add_argument("--models-dir", type=Path, default=Path(".mediamesh/models"))
    parser.add_argument("--serve", action="store_true", help="levels on request (stdin)")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.models_dir, sys.stdin, sys.stdout)
        return 0
    if not args.model:
        parser.error("--model is required (or --serve)")
    if args.threads:
        torch.set_num_threads(args.threads)
    registry = load_registry()
    sizes = [int(s) for s in args.batch_sizes.split(",") if s]
    reports = []
    for name in args.model:
        spec = registry.get(name)
        if spec is None:
            parser.error(f"unknown model {name!r}")
        reports.append(
            run_model(spec, args.models_dir, sizes, args.requests, args.steps, args.min_batches)
        )
    report = {"threads": torch.get_num_threads(), "models": reports}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
