"""previews: what latent previews at every step cost a flux-small job.

The model loads as a worker loads it (`load_host`) and batches run on one thread, as on a
worker's device thread. The same job (same prompt, same seed) runs alternately with
`preview_every_steps=1` and without previews, so both see the same machine load; the
overhead is the median of the paired ratios of wall time. The preview decode alone (unpack,
linear projection, resize, WebP) is timed on its own as well.

    python -m bench.previews --threads 1 > previews.json     (the child run prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import ROOT, Options, Result, log

MODEL = "flux-small"
# The budget: a job with a preview at every step takes at most this much longer.
TARGET_OVERHEAD = 0.10
FULL = {"steps": 8, "size": 128, "pairs": 12, "decodes": 200}
SMOKE = {"steps": 2, "size": 64, "pairs": 1, "decodes": 5}


def measure(plan: dict[str, Any], models_dir: Path) -> dict[str, Any]:
    """Paired job times with and without previews; runs in the child process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from mediamesh.common.generation import GenerationParams
    from mediamesh.common.registry import load_registry
    from mediamesh.common.work import JobFinished, JobParams, StepDone, WorkerEvent
    from mediamesh.worker.core.batch import BatchControl
    from mediamesh.worker.hosting import load_host

    spec = load_registry().get(MODEL)
    assert spec is not None
    generation = GenerationParams(
        prompt="previews bench",
        steps=plan["steps"],
        seed=7,
        width=plan["size"],
        height=plan["size"],
        guidance_scale=spec.defaults.guidance_scale,
    )

    def run_job(host: Any, device: ThreadPoolExecutor, every: int) -> tuple[float, int]:
        job = JobParams("bench", replace(generation, preview_every_steps=every))
        events: list[WorkerEvent] = []
        started = time.perf_counter()
        device.submit(host.run_batch, [job], BatchControl(["bench"]), events.append).result()
        elapsed = time.perf_counter() - started
        if not any(isinstance(e, JobFinished) for e in events):
            raise RuntimeError(f"job failed: {events[-1]}")
        previews = sum(isinstance(e, StepDone) and e.preview is not None for e in events)
        return elapsed, previews

    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(1) as device:
        host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=Path(scratch))
        # The first calls pay one-off costs (allocator, kernel selection); keep them out.
        run_job(host, device, 1)
        run_job(host, device, 0)
        plain_s, preview_s, ratios = [], [], []
        for pair in range(plan["pairs"]):
            # Alternate which goes first, so a drifting load favours neither.
            order = (0, 1) if pair % 2 == 0 else (1, 0)
            times: dict[int, float] = {}
            for every in order:
                times[every], previews = run_job(host, device, every)
                if every and previews != plan["steps"]:
                    raise RuntimeError(f"{previews} previews for {plan['steps']} steps")
            plain_s.append(times[0])
            preview_s.append(times[1])
            ratios.append(times[1] / times[0])
        decode_ms = _decode_ms(host, generation, plan["decodes"], torch)
        host.close()
    overhead = statistics.median(ratios) - 1.0
    return {
        "plain_s_median": round(statistics.median(plain_s), 4),
        "previews_s_median": round(statistics.median(preview_s), 4),
        "overhead_median": round(overhead, 4),
        "overhead_of_medians": round(
            statistics.median(preview_s) / statistics.median(plain_s) - 1.0, 4
        ),
        "within_target": overhead <= TARGET_OVERHEAD,
        "decode_ms_median": decode_ms,
        "pairs": [[round(a, 4), round(b, 4)] for a, b in zip(plain_s, preview_s, strict=True)],
    }


def _decode_ms(host: Any, generation: Any, count: int, torch: Any) -> float:
    """Median milliseconds of one preview from packed latents of the job's shape."""
    from mediamesh.common.work import JobParams

    assert host.previewer is not None
    scale = int(host.pipeline.vae_scale_factor)
    side = generation.width // (scale * 2)
    channels = int(host.pipeline.transformer.config.in_channels)
    latents = torch.randn(1, side * side, channels)
    job = JobParams("bench", replace(generation, preview_every_steps=1))
    times = []
    for _ in range(count):
        started = time.perf_counter()
        host.previewer(latents, 0, job)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def run(options: Options) -> Result:
    """The benchmark as `bench.run` calls it: the measuring runs in a child process."""
    from bench.launcher import MODELS_DIR

    plan = SMOKE if options.smoke else FULL
    result = Result("previews", options)
    argv = [sys.executable, "-m", "bench.previews", "--threads", str(options.torch_threads)]
    argv += ["--models-dir", str(MODELS_DIR)] + (["--smoke"] if options.smoke else [])
    done = subprocess.run(
        argv, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"previews run failed: {done.stderr[-2000:]}")
    measured = json.loads(lines[-1])
    result.config = {
        "model": MODEL,
        **plan,
        "torch_threads": options.torch_threads,
        "target_overhead": TARGET_OVERHEAD,
    }
    result.levels = [
        {"previews": every, "job_s": [pair[every] for pair in measured["pairs"]]}
        for every in (0, 1)
    ]
    result.summary = {k: v for k, v in measured.items() if k != "pairs"}
    log(
        f"previews: {measured['plain_s_median']} s plain, {measured['previews_s_median']} s "
        f"with a preview every step: {measured['overhead_median']:+.1%} "
        f"(decode {measured['decode_ms_median']} ms)"
    )
    plot(result)
    return result


def plot(result: Result) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 4))
    axis.boxplot(
        [level["job_s"] for level in result.levels], tick_labels=["no previews", "every step"]
    )
    axis.set_ylabel("job wall time (s)")
    axis.set_title(f"{MODEL}: latent previews, {result.summary['overhead_median']:+.1%}")
    fig.tight_layout()
    fig.savefig(result.plot_path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.previews", description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--models-dir", type=Path, default=ROOT / ".mediamesh" / "models")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(json.dumps(measure(SMOKE if args.smoke else FULL, args.models_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
