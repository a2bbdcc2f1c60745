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
from mediamesh.worker.models.memory import ModelLoadError, one_line

log = logging.getLogger(__name__)

# Graphs allowed per planned (batch size, shape): see `allow_planned_recompiles`.
RECOMPILE_MARGIN = 2


def refuse_on_device(spec: ModelSpec, device: str) -> None:
    """ModelLoadError naming the field when the entry cannot run on the worker's device."""
    problem = check_on_device(spec, device)
    if problem is not None:
        raise ModelLoadError(f"model {spec.name!r} field {problem}")


def place(spec: ModelSpec, pipeline: Any, device: str) -> None:
    """Moves the pipeline to `device`, or leaves it on the CPU behind offload hooks."""
    offload = spec.gpu.offload
    if offload == "none":
        # Whatever `to` raises (a driver error, weights it cannot copy) comes from outside
        # the load's own checks; the worker's one start-up line must still name the entry.
        try:
            pipeline.to(device)
        except Exception as exc:
            raise ModelLoadError(
                f"model {spec.name!r}: cannot move {spec.pipeline} to {device}: "
                f"{one_line(exc)}; check the device and the model's weight files"
            ) from exc
        return
    enable = (
        pipeline.enable_model_cpu_offload
        if offload == "model"
        else pipeline.enable_sequential_cpu_offload
    )
    try:
        enable(device=device)
    except Exception as exc:
        raise ModelLoadError(f"model {spec.name!r} field gpu.offload: {one_line(exc)}") from exc


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
    allow_planned_recompiles(spec)
    if not spec.warmup:
        log.warning(
            "model %r field warmup: gpu.compile is set with no warm-up shape, so the first "
            "batch of each size and shape compiles while its jobs wait; list the shapes served",
            spec.name,
        )
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


def allow_planned_recompiles(spec: ModelSpec) -> None:
    """Lets dynamo keep a graph for every shape the scheduler will send this model.

    With dynamic false each (batch size, shape) is a graph, and past recompile_limit (8)
    dynamo runs the code eager from then on, saying so once in a log line: a max_batch 8
    model lost its compiled speed at its second resolution. Marking the batch dimension
    dynamic would bound the graphs instead, but swaps the static kernels the entry chose
    for symbolic ones never measured on its GPU; so the limit covers each batch size up to
    max_batch at each warm-up shape and the default shape, twice (guidance on or off
    doubles the denoiser's batch; guards on more than shapes recompile too). Unplanned
    shapes past that still run eager rather than compile without end. Raised, never
    lowered: the limits are per process, shared by every compiled model."""
    if spec.gpu.compile.dynamic:
        return
    d = spec.defaults
    shapes = {
        (
            s.width or d.width,
            s.height or d.height,
            s.num_frames or d.num_frames,
            s.duration_s or d.duration_s,
        )
        for s in spec.warmup
    } | {(d.width, d.height, d.num_frames, d.duration_s)}
    planned = spec.batching.max_batch * len(shapes) * RECOMPILE_MARGIN
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, planned)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, planned)


def _denoiser(spec: ModelSpec, pipeline: Any) -> torch.nn.Module:
    for name in ("transformer", "unet"):
        module = getattr(pipeline, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ModelLoadError(f"model {spec.name!r} field gpu: the pipeline has no transformer or unet")
