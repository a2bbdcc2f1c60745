"""caching: each step-cache kind on flux-small at a few settings, against the uncached run.

The model loads as a worker loads it (`load_host`, cache hooks from the registry entry)
and batches run on one thread, as on a worker's device thread. For every setting the same
jobs (same prompts, same seeds) run with the cache and with `use_cache=False` on the same
host; speedup is uncached over cached wall time (median of the repeats) and quality is the
PSNR and the SSIM (pytorch-msssim: 11-pixel Gaussian window, sigma 1.5, over RGB) of the
8-bit images against the uncached ones. flux-small has random weights: the numbers show
what each cache skips and how far it drifts here, not a trained model's quality.

    python -m bench.caching --threads 1 > caching.json     (the child run prints JSON)
"""

from __future__ import annotations

import argparse
import io
import json
import math
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

import numpy as np

from bench.common import ROOT, Options, Result, log

MODEL = "flux-small"
# Enough steps for the caches to have something to skip, at the model's default size.
STEPS, SIZE, BATCH, REPEATS = 16, 128, 1, 3
# Two or three settings per kind, from gentle to aggressive.
SETTINGS: list[dict[str, Any]] = [
    # With random weights the first block's residual changes by ~0.45 between steps.
    {"kind": "first-block", "threshold": 0.45},
    {"kind": "first-block", "threshold": 0.5},
    {"kind": "first-block", "threshold": 0.6},
    {"kind": "taylorseer", "cache_interval": 2, "disable_cache_before_step": 3},
    {"kind": "taylorseer", "cache_interval": 3, "disable_cache_before_step": 3},
    {"kind": "taylorseer", "cache_interval": 5, "disable_cache_before_step": 3},
    {"kind": "mag", "threshold": 0.06},
    {"kind": "mag", "threshold": 0.12},
    {"kind": "mag", "threshold": 0.24},
    {"kind": "faster", "spatial_attention_block_skip_range": 2},
    {"kind": "faster", "spatial_attention_block_skip_range": 3},
    {"kind": "faster", "spatial_attention_block_skip_range": 4},
    {"kind": "pab", "spatial_attention_block_skip_range": 2},
    {"kind": "pab", "spatial_attention_block_skip_range": 3},
    {"kind": "pab", "spatial_attention_block_skip_range": 4},
]
SMOKE = {
    "settings": [{"kind": "taylorseer", "cache_interval": 2, "disable_cache_before_step": 1}],
    "steps": 3,
    "size": 64,
    "batch": 1,
    "repeats": 1,
}
# Identical images have infinite PSNR; JSON has no infinity, so it is reported as this.
IDENTICAL_PSNR_DB = 100.0


def psnr(reference: np.ndarray, image: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two 8-bit images."""
    error = np.mean((reference.astype(np.float64) - image.astype(np.float64)) ** 2)
    if error == 0:
        return IDENTICAL_PSNR_DB
    return round(float(10 * math.log10(255.0**2 / error)), 2)


def ssim(reference: np.ndarray, image: np.ndarray) -> float:
    """Structural similarity of two 8-bit RGB images (1 = identical)."""
    import torch
    from pytorch_msssim import ssim as structural_similarity

    def batch(pixels: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(pixels.astype(np.float32)).permute(2, 0, 1).unsqueeze(0)

    value = structural_similarity(batch(reference), batch(image), data_range=255.0)
    return round(float(value), 5)


def rgb(data: bytes) -> np.ndarray:
    """The pixels of an encoded image."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def measure(plan: dict[str, Any], models_dir: Path) -> list[dict[str, Any]]:
    """Rows of (setting, speedup, PSNR); runs in the child process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mediamesh.common.generation import GenerationParams
    from mediamesh.common.registry import ModelSpec, load_registry
    from mediamesh.common.work import JobFinished, JobParams, WorkerEvent
    from mediamesh.worker.core.batch import BatchControl
    from mediamesh.worker.hosting import load_host

    base = load_registry().get(MODEL)
    assert base is not None
    generations = [
        GenerationParams(
            prompt=f"caching bench {i}",
            steps=plan["steps"],
            seed=100 + i,
            width=plan["size"],
            height=plan["size"],
            guidance_scale=base.defaults.guidance_scale,
        )
        for i in range(plan["batch"])
    ]

    def run_batch(host: Any, device: ThreadPoolExecutor, use_cache: bool) -> tuple[float, list]:
        jobs = [
            JobParams(f"j{i}", replace(g, use_cache=use_cache)) for i, g in enumerate(generations)
        ]
        events: list[WorkerEvent] = []
        control = BatchControl([j.job_id for j in jobs])
        started = time.perf_counter()
        device.submit(host.run_batch, jobs, control, events.append).result()
        elapsed = time.perf_counter() - started
        done = {e.job_id: e for e in events if isinstance(e, JobFinished)}
        if len(done) != len(jobs):
            raise RuntimeError(f"jobs failed: {[e for e in events if e.job_id not in done]}")
        return elapsed, [rgb(done[j.job_id].data) for j in jobs]

    rows = []
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(1) as device:
        for setting in plan["settings"]:
            spec = ModelSpec.model_validate({**base.model_dump(), "cache": setting})
            host = load_host(
                spec, models_dir=models_dir, device="cpu", checkpoint_dir=Path(scratch)
            )
            # The first call pays one-off costs (allocator, kernel selection); keep it out.
            run_batch(host, device, True)
            cached_s, full_s = [], []
            for _ in range(plan["repeats"]):
                elapsed, full = run_batch(host, device, False)
                full_s.append(elapsed)
                elapsed, cached = run_batch(host, device, True)
                cached_s.append(elapsed)
            host.close()
            quality = [psnr(a, b) for a, b in zip(full, cached, strict=True)]
            structure = [ssim(a, b) for a, b in zip(full, cached, strict=True)]
            # Each pair runs back to back, so a neighbour's burst of load hits both halves:
            # the ratio within a pair is steadier than the ratio of medians.
            ratios = [full / cached for full, cached in zip(full_s, cached_s, strict=True)]
            row = {
                "kind": setting["kind"],
                "setting": {k: v for k, v in setting.items() if k != "kind"},
                "uncached_s": round(statistics.median(full_s), 3),
                "cached_s": round(statistics.median(cached_s), 3),
                "speedup": round(statistics.median(ratios), 3),
                "psnr_db_mean": round(statistics.mean(quality), 2),
                "psnr_db_min": min(quality),
                "ssim_mean": round(statistics.mean(structure), 5),
                "ssim_min": min(structure),
            }
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def run(options: Options) -> Result:
    """The benchmark as `bench.run` calls it: the measuring runs in a child process."""
    from bench.launcher import MODELS_DIR

    plan = plan_for(options.smoke)
    result = Result("caching", options)
    argv = [sys.executable, "-m", "bench.caching", "--threads", str(options.torch_threads)]
    argv += ["--models-dir", str(MODELS_DIR)] + (["--smoke"] if options.smoke else [])
    done = subprocess.run(
        argv, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"caching run failed: {done.stderr[-2000:]}")
    result.levels = json.loads(lines[-1])
    result.config = {
        "model": MODEL,
        "steps": plan["steps"],
        "size": plan["size"],
        "batch": plan["batch"],
        "repeats": plan["repeats"],
        "torch_threads": options.torch_threads,
        "quality": (
            "PSNR (dB; 100 = identical) and SSIM (1 = identical) of 8-bit images vs the "
            "uncached run, same seeds"
        ),
    }
    for row in result.levels:
        log(
            f"caching {row['kind']} {row['setting']}: x{row['speedup']}, "
            f"{row['psnr_db_mean']} dB, SSIM {row['ssim_mean']}"
        )
    result.summary = {"table": markdown_table(result.levels)}
    plot(result)
    return result


def plan_for(smoke: bool) -> dict[str, Any]:
    if smoke:
        return SMOKE
    return {"settings": SETTINGS, "steps": STEPS, "size": SIZE, "batch": BATCH, "repeats": REPEATS}


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The README's table of the rows."""
    lines = [
        "| kind | setting | speedup | PSNR dB (mean / min) | SSIM (mean / min) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        setting = ", ".join(f"{k}={v}" for k, v in row["setting"].items())
        lines.append(
            f"| {row['kind']} | {setting} | {row['speedup']:.2f}x "
            f"| {row['psnr_db_mean']} / {row['psnr_db_min']} "
            f"| {row['ssim_mean']} / {row['ssim_min']} |"
        )
    return "\n".join(lines)


def plot(result: Result) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7, 5))
    for kind in dict.fromkeys(row["kind"] for row in result.levels):
        rows = [row for row in result.levels if row["kind"] == kind]
        axis.plot(
            [r["speedup"] for r in rows], [r["psnr_db_mean"] for r in rows], marker="o", label=kind
        )
    axis.set_xlabel("speedup over uncached")
    axis.set_ylabel("PSNR vs uncached (dB)")
    axis.set_title(f"{MODEL}: step caches")
    axis.legend()
    fig.tight_layout()
    fig.savefig(result.plot_path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.caching", description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--models-dir", type=Path, default=ROOT / ".mediamesh" / "models")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(json.dumps(measure(plan_for(args.smoke), args.models_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
