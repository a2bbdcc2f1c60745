"""Context (sequence) parallelism through diffusers' context-parallel plans.

Every rank holds the whole pipeline. The transformer's `_cp_plan` (Flux, Wan, ...) splits
its inputs along the sequence before the blocks and gathers the output after them;
attention in between exchanges heads (Ulysses, an all-to-all) or rotates key/value chunks
(ring). Everything outside the transformer runs replicated, so every rank holds the same
latents, as in tensor mode.

diffusers' `enable_parallelism` picks each rank's device as `rank % accelerator count`,
which divides by zero on a CPU-only host, and ignores the entry's device list. So the
group's config is resolved here, with the rank's own device, and then handed to diffusers'
`apply_context_parallel`, the same steps `enable_parallelism` takes after resolving.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from diffusers import ContextParallelConfig, DiffusionPipeline
from diffusers.hooks.context_parallel import apply_context_parallel
from diffusers.models._modeling_parallel import ParallelConfig
from diffusers.utils.constants import DIFFUSERS_ATTN_BACKEND
from torch.distributed.device_mesh import init_device_mesh

from mediamesh.common.parallelism_spec import ParallelismSpec, usable_modes
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError

# Backends diffusers 0.42 runs under context parallelism (`supports_context_parallel`) whose
# forward op also returns the log-sum-exp ring attention merges by (attention_dispatch.py):
# "native" and "_native_npu" raise on return_lse; the *_hub variants are refused at load
# (`gpu_options`: they download kernels).
RING_BACKENDS = frozenset({"flash", "_native_cudnn", "_native_flash", "sage"})


def context_plan(pipeline: DiffusionPipeline) -> dict[str, Any] | None:
    """The denoiser's context-parallel plan; None when it has none (UNets, SD3, ...)."""
    transformer = getattr(pipeline, "transformer", None)
    plan = getattr(transformer, "_cp_plan", None)
    return plan if isinstance(plan, dict) and plan else None


def check_context_support(spec: ModelSpec, pipeline: DiffusionPipeline, device: str) -> None:
    """ModelLoadError naming the entry and field when context mode cannot run this model."""
    options = spec.parallelism
    if context_plan(pipeline) is None:
        denoiser = type(getattr(pipeline, "transformer", None) or pipeline.unet).__name__
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.mode: context parallelism needs a "
            f"transformer with a diffusers context-parallel plan, and {denoiser} has none; "
            f"use parallelism mode {usable_modes(spec.pipeline, 'context')}"
        )
    if options.ring > 1 and not device.startswith("cuda"):
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.ring: ring attention needs a CUDA "
            "attention backend that returns log-sum-exp; on CPU use ulysses only"
        )
    # Without gpu.attention_backend the processors dispatch to diffusers' default backend:
    # DIFFUSERS_ATTN_BACKEND, "native" unless that is set.
    backend = spec.gpu.attention_backend or DIFFUSERS_ATTN_BACKEND
    if options.ring > 1 and backend not in RING_BACKENDS:
        # Ring attention merges each rank's partial result by its log-sum-exp, and the
        # default backend (torch SDPA, "native") raises "does not support return_lse=True"
        # at the first step of the first batch, on CUDA as on CPU.
        raise ModelLoadError(
            f"model {spec.name!r} field gpu.attention_backend: parallelism.ring "
            f"{options.ring} needs a backend that returns log-sum-exp, and {backend} does "
            f"not; set gpu.attention_backend to one of {', '.join(sorted(RING_BACKENDS))}, "
            "or use ulysses only"
        )
    heads = getattr(pipeline.transformer.config, "num_attention_heads", None)
    if isinstance(heads, int) and heads % options.ulysses != 0:
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.ulysses: {heads} attention heads "
            f"cannot be split over {options.ulysses} ranks"
        )


def enable_context_parallel(
    pipeline: DiffusionPipeline, options: ParallelismSpec, device: torch.device, *, rank: int
) -> None:
    """Collective: every rank calls it once the default process group is up."""
    transformer = pipeline.transformer
    config = ContextParallelConfig(ulysses_degree=options.ulysses, ring_degree=options.ring)
    mesh = init_device_mesh(device.type, config.mesh_shape, mesh_dim_names=config.mesh_dim_names)
    resolved = ParallelConfig(context_parallel_config=config)
    resolved.setup(rank, dist.get_world_size(), device, mesh=mesh)
    transformer._parallel_config = resolved
    # The attention processors read the config to swap their attention for the
    # Ulysses / ring variant.
    for module in transformer.modules():
        processor = getattr(module, "processor", None)
        if processor is not None and hasattr(processor, "_parallel_config"):
            processor._parallel_config = resolved
    apply_context_parallel(transformer, config, transformer._cp_plan)
