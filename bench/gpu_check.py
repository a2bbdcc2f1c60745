"""`make gpu-check`: what a CUDA machine does with a FLUX-architecture transformer; writes JSON.

A FluxTransformer2DModel at FLUX.1's full width (24 heads of 128, hidden 3072) with few
blocks (2 double-stream, 4 single-stream: about 1.3 B parameters, random weights) runs a
short Euler loop at 1024x1024 (4096 image tokens, 512 text tokens), batches 1, 2 and 4, in
bf16: eager, with regional compile (compile_repeated_blocks) and with the first-block
cache. Per mode and batch it records the seconds per step and the peak device memory.
Then one `mediamesh up` serves a pipeline built around a transformer of the same width and
the load generator measures p50 and p99; then meshes whose dispatch-ahead tail ends at a
batch's first result and at its last, alternately, measure throughput and the mean batch
(`scheduler.dispatch_ahead_tail_end`: which end keeps a CUDA device busier).

`--dry` runs the same code on the CPU at a tiny width and size for one step, with the
`eager` compile backend (it traces without generating kernels): `make test` runs it.

    python -m bench.gpu_check --out bench/results/gpu_check.json [--dry]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    batch_totals,
    git_commit,
    level_from_load,
    log,
    machine,
    percentiles,
    run_loadgen,
)

FULL = {
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "num_layers": 2,
    "num_single_layers": 4,
    "axes_dims_rope": (16, 56, 56),
    "in_channels": 64,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": True,
}
DRY = {
    **FULL,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "num_layers": 1,
    "num_single_layers": 1,
    "axes_dims_rope": (4, 6, 6),
    "joint_attention_dim": 32,
    "pooled_projection_dim": 32,
}
PLANS = {
    "full": {"size": 1024, "text_tokens": 512, "steps": 8, "batches": (1, 2, 4), "device": "cuda"},
    "dry": {"size": 64, "text_tokens": 8, "steps": 1, "batches": (1, 2), "device": "cpu"},
}
MODES = ("eager", "regional_compile", "first_block_cache")
# Random weights change the first block's residual by ~45 % per step (see the caching
# benchmark); a threshold above that lets the cache skip.
FIRST_BLOCK_THRESHOLD = 0.5


def build_transformer(config: dict[str, Any], device: str, dtype: Any) -> Any:
    import torch
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    with torch.device(device):
        model = FluxTransformer2DModel(**config)
    return model.to(dtype).eval()


def inputs(
    config: dict[str, Any], plan: dict[str, Any], batch: int, device: str, dtype: Any
) -> dict[str, Any]:
    """The transformer's keyword arguments for one batch at the plan's size."""
    import torch

    side = plan["size"] // 16  # 8x VAE downsampling, then 2x2 packing
    tokens, text = side * side, plan["text_tokens"]
    generator = torch.Generator("cpu").manual_seed(batch)

    def noise(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator).to(device, dtype)

    image_ids = torch.zeros(side, side, 3)
    image_ids[..., 1] = torch.arange(side)[:, None]
    image_ids[..., 2] = torch.arange(side)[None, :]
    return {
        "hidden_states": noise(batch, tokens, config["in_channels"]),
        "encoder_hidden_states": noise(batch, text, config["joint_attention_dim"]),
        "pooled_projections": noise(batch, config["pooled_projection_dim"]),
        "guidance": torch.full((batch,), 3.5, device=device, dtype=dtype),
        "img_ids": image_ids.reshape(-1, 3).to(device, dtype),
        "txt_ids": torch.zeros(text, 3, device=device, dtype=dtype),
    }


def denoise(model: Any, arguments: dict[str, Any], steps: int) -> None:
    """An Euler loop over `steps` sigmas, as FluxPipeline runs its transformer."""
    import torch

    latents = arguments["hidden_states"]
    sigmas = torch.linspace(1.0, 0.0, steps + 1)
    with torch.inference_mode(), model.cache_context("cond"):
        for index in range(steps):
            timestep = torch.full((latents.shape[0],), float(sigmas[index]), device=latents.device)
            velocity = model(
                **{**arguments, "hidden_states": latents},
                timestep=timestep.to(latents.dtype),
                return_dict=False,
            )[0]
            latents = latents + (sigmas[index + 1] - sigmas[index]) * velocity


def measure(
    config: dict[str, Any], plan: dict[str, Any], dry: bool, modes: tuple[str, ...] = MODES
) -> list[dict[str, Any]]:
    import torch
    from diffusers.hooks import FirstBlockCacheConfig

    from mediamesh.common.gpu_options import CompileOptions

    # What a registry entry's `gpu.compile: {mode: regional}` runs with, so the numbers are
    # the ones a worker gets (static shapes, graph breaks allowed).
    compiled = CompileOptions(mode="regional", backend="eager" if dry else "inductor")
    device = plan["device"]
    dtype = torch.float32 if dry else torch.bfloat16
    cuda = device.startswith("cuda")
    rows = []
    for mode in modes:
        model = build_transformer(config, device, dtype)
        if mode == "regional_compile":
            model.compile_repeated_blocks(
                dynamic=compiled.dynamic, fullgraph=compiled.fullgraph, backend=compiled.backend
            )
        if mode == "first_block_cache":
            model.enable_cache(FirstBlockCacheConfig(threshold=FIRST_BLOCK_THRESHOLD))
        parameters = sum(p.numel() for p in model.parameters())
        for batch in plan["batches"]:
            arguments = inputs(config, plan, batch, device, dtype)
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            denoise(model, arguments, plan["steps"])  # compiles, autotunes, warms the allocator
            if cuda:
                # Before the clock stops: the kernels run after their launch returns.
                torch.cuda.synchronize()
            first_s = time.perf_counter() - started
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            denoise(model, arguments, plan["steps"])
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - started
            row = {
                "mode": mode,
                "batch": batch,
                "parameters": parameters,
                "step_s": round(elapsed / plan["steps"], 5),
                "first_run_s": round(first_s, 3),
                "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            }
            log(f"gpu-check {mode} batch {batch}: {row['step_s']} s/step")
            rows.append(row)
        del model
        if cuda:
            torch.cuda.empty_cache()
    return rows


def build_pipeline(width: dict[str, Any], models_dir: Path, out: Path) -> Path:
    """flux-tiny's text encoders, tokenizers and VAE around a transformer of `width`'s
    heads and blocks (its input sizes match those encoders), saved as a model folder."""
    from diffusers import FluxPipeline

    pipeline = FluxPipeline.from_pretrained(models_dir / "flux-tiny", local_files_only=True)
    tiny = pipeline.transformer.config
    config = {
        **width,
        "in_channels": tiny.in_channels,
        "joint_attention_dim": tiny.joint_attention_dim,
        "pooled_projection_dim": tiny.pooled_projection_dim,
    }
    pipeline.transformer = build_transformer(config, "cpu", pipeline.transformer.dtype)
    pipeline.save_pretrained(out)
    return out


# The dispatch-ahead tail A/B: the same load through a mesh whose learned batch tail ends at
# the first result (the default on an accelerator) and at the last (a CPU worker's), in
# alternating rounds, so that the batch given ahead arrives as the device frees or only once
# every result is encoded. `max_batch` 4 at `concurrency` 8: a running batch and one ahead.
TAIL_ENDS = ("first_result", "last_result")
TAIL_AB = {
    "full": {"rounds": 2, "concurrency": 8, "requests": 32},
    "dry": {"rounds": 1, "concurrency": 4, "requests": 4},
}


def gpu_flux_registry(folder: Path, plan: dict[str, Any], dry: bool, out: Path) -> Path:
    """A registry serving the wide pipeline in `folder` as `gpu-flux`."""
    import yaml

    size = plan["size"]
    entry = {
        "name": "gpu-flux",
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": str(folder),
        "dtype": "float32" if dry else "bfloat16",
        "batching": {"mode": "dynamic", "max_batch": 4, "max_wait_ms": 20},
        "defaults": {"steps": plan["steps"], "width": size, "height": size},
        "limits": {"max_width": size, "max_height": size},
        "warmup": [{"steps": 1, "batch": 1}],
    }
    out.write_text(yaml.safe_dump({"models": [entry]}))
    return out


def mesh_run(
    plan: dict[str, Any], dry: bool, models_dir: Path, tail_rounds: int | None = None
) -> dict[str, Any]:
    """`mediamesh up` with one worker serving the wide pipeline: p50 and p99 at c=2 with the
    default settings, then `tail_rounds` rounds of the dispatch-ahead tail A/B (TAIL_AB's
    by default)."""
    from bench.launcher import running_mesh

    requests = 4 if dry else 16
    ab = TAIL_AB["dry" if dry else "full"]
    if tail_rounds is not None:
        ab = {**ab, "rounds": tail_rounds}
    worker = {"models": ["gpu-flux"], "device": "cpu" if dry else "cuda:0"}
    with tempfile.TemporaryDirectory(prefix="mediamesh-gpu-check-") as scratch:
        folder = build_pipeline(DRY if dry else FULL, models_dir, Path(scratch) / "gpu-flux")
        registry = str(gpu_flux_registry(folder, plan, dry, Path(scratch) / "models.yaml"))
        with running_mesh([worker], registry_path=registry) as mesh:
            report = run_loadgen(
                mesh.gateway, ["gpu-flux"], timeout_s=1800, concurrency=2, requests=requests
            )
        tail_rows = []
        for round_index in range(ab["rounds"]):
            for tail_end in TAIL_ENDS:
                scheduler = {"dispatch_ahead_tail_end": tail_end}
                with running_mesh([worker], scheduler, registry_path=registry) as mesh:
                    tail_rows.append(tail_level(mesh, ab, tail_end, round_index))
    return {
        "requests": requests,
        "concurrency": 2,
        "errors": report["errors"],
        **percentiles(report["latencies_ms"]),
        "tail_end_ab": tail_rows,
    }


def tail_level(mesh: Any, ab: dict[str, int], tail_end: str, round_index: int) -> dict[str, Any]:
    """One level of the tail A/B: throughput, latency and the mean batch the scheduler formed."""
    metrics_port = mesh.config["scheduler"]["metrics_port"]
    before = batch_totals(metrics_port, "gpu-flux")
    report = run_loadgen(
        mesh.gateway,
        ["gpu-flux"],
        timeout_s=1800,
        concurrency=ab["concurrency"],
        requests=ab["requests"],
        warmup=ab["concurrency"],
    )
    jobs, batches = (
        after - earlier
        for after, earlier in zip(batch_totals(metrics_port, "gpu-flux"), before, strict=True)
    )
    row = level_from_load(report, tail_end=tail_end, round=round_index)
    row["mean_batch"] = round(jobs / batches, 2) if batches else None
    log(
        f"gpu-check tail {tail_end} round {round_index}: {row['throughput_rps']} img/s, "
        f"p50 {row['p50_ms']} ms, mean batch {row['mean_batch']}"
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument("--dry", action="store_true", help="tiny CPU run of the same code")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu_check.json"))
    parser.add_argument("--models-dir", type=Path, default=Path(".mediamesh/models"))
    parser.add_argument("--no-mesh", action="store_true", help="skip the mediamesh up run")
    parser.add_argument(
        "--tail-rounds",
        type=int,
        default=None,
        help="rounds of the dispatch-ahead tail A/B (default 2, dry 1; 0 skips it)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated modes to measure (default: all of {', '.join(MODES)})",
    )
    args = parser.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        parser.error(
            f"--modes: {', '.join(unknown) or 'none given'}; choose from {', '.join(MODES)}"
        )
    if args.tail_rounds is not None and args.tail_rounds < 0:
        parser.error(f"--tail-rounds: {args.tail_rounds} is below 0")
    import torch

    plan = PLANS["dry" if args.dry else "full"]
    if not args.dry and not torch.cuda.is_available():
        parser.error("no CUDA device; use --dry for the CPU run")
    config = DRY if args.dry else FULL
    record: dict[str, Any] = {
        "dry": args.dry,
        "git": git_commit(args.out.parent),
        "machine": machine(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "transformer": {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
        "plan": {k: list(v) if isinstance(v, tuple) else v for k, v in plan.items()},
        "first_block_threshold": FIRST_BLOCK_THRESHOLD,
        "steps": measure(config, plan, args.dry, modes),
        "mesh": None
        if args.no_mesh
        else mesh_run(plan, args.dry, args.models_dir, args.tail_rounds),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    log(f"gpu-check: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
