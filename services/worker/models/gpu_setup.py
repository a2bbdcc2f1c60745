"""Applies a registry entry's `gpu:` options to a freshly loaded pipeline.

Order matters: placement (or offload hooks) first, then the attention backend and VAE
switches, and compilation last, so that it traces the modules as they will run.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from mediamesh.common.gpu_options import check_on_device
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError

log = logging.getLogger(__name__)


def refuse_on_device(spec: ModelSpec, device: str) -> None:
    """ModelLoadError naming the field when the entry cannot run on the worker's device."""
    problem = check_on_device(spec, device)
    if problem is not None:
        raise ModelLoadError(f"model {spec.name!r} field {problem}")


def place(spec: ModelSpec, pipeline: Any, device: str) -> None:
    """Moves the pipeline to `device`, or leaves it on the CPU behind offload hooks."""
    offload = spec.gpu.offload
    if offload == "none":
        pipeline.to(device)
        return
    enable = (
        pipeline.enable_model_cpu_offload
        if offload == "model"
        else pipeline.enable_sequential_cpu_offload
    )
    try:
        enable(device=device)
    except (RuntimeError, ValueError, ImportError) as exc:
        raise ModelLoadError(f"model {spec.name!r} field gpu.offload: {exc}") from exc


def apply_gpu_options(spec: ModelSpec, pipeline: Any) -> None:
    """Attention backend, VAE tiling and slicing, then compilation."""
    options = spec.gpu
    if options.attention_backend is not None:
        denoiser = _denoiser(spec, pipeline)
        setter = getattr(denoiser, "set_attention_backend", None)
        if setter is None:
            raise ModelLoadError(
                f"model {spec.name!r} field gpu.attention_backend: "
                f"{type(denoiser).__name__} has no attention dispatcher"
            )
        try:
            setter(options.attention_backend)
        except (RuntimeError, ValueError, ImportError) as exc:
            raise ModelLoadError(f"model {spec.name!r} field gpu.attention_backend: {exc}") from exc
    for switch in ("tiling", "slicing"):
        if getattr(options.vae, switch):
            vae = getattr(pipeline, "vae", None)
            enable = getattr(vae, f"enable_{switch}", None)
            if enable is None:
                raise ModelLoadError(
                    f"model {spec.name!r} field gpu.vae.{switch}: "
                    f"{type(vae).__name__} has no enable_{switch}"
                )
            enable()
    if options.compile.mode != "none":
        compile_denoiser(spec, _denoiser(spec, pipeline))


def compile_denoiser(spec: ModelSpec, denoiser: torch.nn.Module) -> None:
    """torch.compile of the repeated blocks (regional) or of the whole denoiser (full), in
    place: the module keeps its type, so hooks and `pipeline.transformer` stay valid."""
    settings = spec.gpu.compile
    if settings.mode == "none":
        return
    arguments = {
        "dynamic": settings.dynamic,
        "fullgraph": settings.fullgraph,
        "backend": settings.backend,
    }
    if settings.mode == "full":
        denoiser.compile(**arguments)
        return
    repeated = getattr(denoiser, "compile_repeated_blocks", None)
    if repeated is not None and getattr(denoiser, "_repeated_blocks", None):
        repeated(**arguments)
        return
    # Models that do not declare their repeated blocks: compile each child of a ModuleList
    # whose children are all one class (the transformer stack).
    stacks = [
        m
        for m in denoiser.modules()
        if isinstance(m, torch.nn.ModuleList) and len({type(c) for c in m}) == 1 and len(m) > 1
    ]
    if not stacks:
        raise ModelLoadError(
            f"model {spec.name!r} field gpu.compile.mode: {type(denoiser).__name__} has no "
            "repeated blocks to compile; use mode full"
        )
    for stack in stacks:
        for block in stack:
            block.compile(**arguments)


def _denoiser(spec: ModelSpec, pipeline: Any) -> torch.nn.Module:
    for name in ("transformer", "unet"):
        module = getattr(pipeline, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ModelLoadError(f"model {spec.name!r} field gpu: the pipeline has no transformer or unet")
