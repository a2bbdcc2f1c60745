"""What a model's load would refuse that is known without its weights, checked at start.

The worker runs these for every hosted model before any loads, cold ones included: under
residency limits a model hosted cold would otherwise find out at its first batch, after
evicting a healthy model to make room for a load that cannot work, and fail every job of
it while the mesh called it ready. The residency runs them again before each cold load,
for the same reason (the folder may have gone since).

Pipeline-, tensor- and context-parallel entries get their weightless checks here too, before
any rank spawns: a tensor group that could not split its heads failed inside every rank with
a traceback, a device the host lacks ran on the CPU under the listed name, and quantization
ran in modes where its result was never checked against data mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from mediamesh.common.parallelism_spec import TENSOR_PARALLEL_PIPELINES, usable_modes
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.gpu_setup import refuse_on_device
from mediamesh.worker.models.host import host_class, local_folder, refuse_quantization_on_device
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.step_cache import refuse_uncached_denoiser

# FluxSingleTransformerBlock's MLP width: its `mlp_ratio`, which the transformer does not
# pass on (diffusers 0.42), times the attention width.
SINGLE_BLOCK_MLP_RATIO = 4.0


def refuse_unloadable(spec: ModelSpec, *, models_dir: Path, device: str) -> None:
    """ModelLoadError naming the model (and the field, where one is at fault) when its load
    on `device` would fail whatever the memory: an absent folder, a class diffusers lacks, a
    dtype or option without kernels on the device, a cache its denoiser cannot take."""
    if spec.pipeline == "Echo":
        return
    local_dir = local_folder(spec, models_dir)
    # Parallel modes place their ranks on their own devices and check them as they load,
    # at start (they are never hosted cold); what needs no weights is checked here, before
    # any rank spawns.
    if spec.parallelism.mode == "data":
        host_class(spec)
        refuse_on_device(spec, device)
        refuse_quantization_on_device(spec, device)
    else:
        refuse_unstartable(spec, local_dir)
    if spec.cache is not None:
        refuse_uncached_denoiser(spec, local_dir)


def refuse_unstartable(spec: ModelSpec, local_dir: Path) -> None:
    """ModelLoadError for a parallel entry that cannot start here (data mode: nothing)."""
    if spec.parallelism.mode == "data":
        return
    refuse_parallel_quantization(spec)
    refuse_absent_mps(spec)
    if spec.parallelism.mode == "tensor":
        refuse_tensor_split(spec, local_dir)


def refuse_parallel_quantization(spec: ModelSpec) -> None:
    """Quantization is checked against unquantized data mode in data mode only: a context
    group drifted 3/255 from data mode with int8, and a split denoiser is not quantized."""
    if spec.quantization != "none" and spec.parallelism.mode != "data":
        raise ModelLoadError(
            f"model {spec.name!r} field quantization: {spec.quantization} needs parallelism "
            f"mode data, not {spec.parallelism.mode}; set quantization to none or use data mode"
        )


def refuse_absent_mps(spec: ModelSpec) -> None:
    """An `mps` device on a host without one: accelerate and torch would place nothing there
    and run on the CPU while the worker reports the device as mps. (Absent CUDA devices are
    refused by `worker.device_check`.)"""
    options = spec.parallelism
    for field, devices in (("devices", options.devices), ("max_memory", list(options.max_memory))):
        if "mps" in devices and not torch.backends.mps.is_available():
            raise ModelLoadError(
                f"model {spec.name!r} field parallelism.{field}: mps is not available on this "
                "host (no Apple GPU, or a torch build without MPS); list cpu or cuda devices"
            )


def refuse_tensor_split(spec: ModelSpec, local_dir: Path) -> None:
    """Tensor mode splits Flux transformers only, over a size that divides their heads."""
    if spec.pipeline not in TENSOR_PARALLEL_PIPELINES:
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.mode: tensor parallelism is implemented "
            f"for {', '.join(sorted(TENSOR_PARALLEL_PIPELINES))} only; use parallelism mode "
            f"{usable_modes(spec.pipeline, 'tensor')}"
        )
    try:
        config = json.loads((local_dir / "transformer" / "config.json").read_text())
    except (OSError, ValueError):
        return  # the load names the unreadable folder
    if isinstance(config, dict):
        refuse_unsplittable(spec.name, config, spec.parallelism.size)


def split_problem(heads: int, head_dim: int, size: int) -> str | None:
    """Why a Flux transformer with `heads` heads of `head_dim` cannot be split over `size`
    tensor-parallel ranks (each takes whole heads and an equal share of the MLP), or None."""
    if heads % size != 0:
        return f"{heads} attention heads cannot be split over {size} ranks"
    mlp_width = int(heads * head_dim * SINGLE_BLOCK_MLP_RATIO)
    if mlp_width % size != 0:
        return f"MLP width {mlp_width} cannot be split over {size} ranks"
    return None


def refuse_unsplittable(model: str, config: Mapping[str, Any], size: int) -> None:
    """ModelLoadError naming the entry and parallelism.size when the transformer `config`
    (its config.json) cannot be split over `size` ranks."""
    heads = config.get("num_attention_heads")
    head_dim = config.get("attention_head_dim")
    if not (isinstance(heads, int) and isinstance(head_dim, int)):
        return
    problem = split_problem(heads, head_dim, size)
    if problem is not None:
        divisors = [n for n in range(1, heads + 1) if split_problem(heads, head_dim, n) is None]
        raise ModelLoadError(
            f"model {model!r} field parallelism.size: {problem}; use a size that divides "
            f"them ({', '.join(map(str, divisors))})"
        )
