"""A registry entry's load-time options for accelerators: compile, attention, VAE and offload.

`gpu:` on an entry; every field defaults to what a plain `from_pretrained(...).to(device)`
does. `check_load_options` refuses combinations that cannot work whatever the device is;
what depends on the worker's device (float16 or offload on a CPU) is checked when the
worker loads the model. Pure: diffusers is read only to list attention backends, and only
where it is installed.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mediamesh.common.warmup import check_warmup


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CompileOptions(_Options):
    """torch.compile of the denoiser."""

    # regional: each repeated transformer block (diffusers' compile_repeated_blocks), which
    # compiles once per block class; full: the whole denoiser.
    mode: Literal["none", "regional", "full"] = "none"
    # Shapes vary between requests; False compiles per shape (warm-up pays for listed ones).
    dynamic: bool = Field(False, strict=True)
    fullgraph: bool = Field(False, strict=True)
    # inductor generates kernels; eager and aot_eager only trace (for checking the wiring).
    backend: Literal["inductor", "eager", "aot_eager"] = "inductor"


class VaeOptions(_Options):
    """Decoder memory savers: tiles of a large image, one batch item at a time."""

    tiling: bool = Field(False, strict=True)
    slicing: bool = Field(False, strict=True)


class GpuOptions(_Options):
    """How a model is placed and accelerated on its device, applied at load."""

    compile: CompileOptions = Field(default_factory=CompileOptions)
    # A diffusers attention dispatcher backend ("native", "flash", "sage", ...); None keeps
    # the model's own (torch scaled-dot-product attention).
    attention_backend: str | None = None
    vae: VaeOptions = Field(default_factory=VaeOptions)
    # model: whole components move to the device when used (enable_model_cpu_offload);
    # sequential: every layer does (enable_sequential_cpu_offload), slowest, least memory.
    offload: Literal["none", "model", "sequential"] = "none"


# Backends that fetch kernels from the hub at load: a worker never downloads at run time.
_DOWNLOADING_SUFFIX = "_hub"
# Backends with CPU kernels; the rest need CUDA (or another accelerator).
CPU_ATTENTION_BACKENDS = frozenset({"native", "_native_math", "flex"})


@functools.cache
def attention_backends() -> frozenset[str] | None:
    """Names the installed diffusers dispatcher knows; None without diffusers."""
    try:
        from diffusers.models.attention_dispatch import AttentionBackendName
    except ImportError:
        return None
    return frozenset(member.value for member in AttentionBackendName)


def check_load_options(spec: Any) -> None:
    """ValueError naming the field of a `ModelSpec` whose load options cannot work together."""
    check_warmup(spec)
    gpu: GpuOptions = spec.gpu
    mode = spec.parallelism.mode
    if spec.pipeline == "Echo":
        if spec.cache is not None:
            raise ValueError("cache: the builtin Echo model has no transformer to cache")
        if gpu != GpuOptions():
            raise ValueError("gpu: the builtin Echo model runs no torch; leave gpu unset")
        return
    if spec.cache is not None and mode == "context":
        # Each rank's blocks see only its slice of the sequence, so a data-dependent skip
        # (first-block compares its own slice's residual) can differ between ranks: one
        # skips the remaining blocks while another waits in their all-to-all for ever. The
        # step- and timestep-driven kinds agree across ranks in principle, but are refused
        # too until a test runs them over the split.
        raise ValueError(
            f"cache: a {spec.cache.kind} step cache cannot combine with parallelism.mode "
            "context: each rank would decide to skip from its own slice of the sequence and "
            "the ranks could diverge; use data or tensor mode, or no cache"
        )
    if gpu.offload != "none" and mode != "data":
        raise ValueError(
            f"gpu.offload: {gpu.offload} offload moves weights on and off one device; it cannot "
            f"combine with parallelism.mode {mode} (use data mode, or no offload)"
        )
    if gpu.compile.mode != "none":
        if mode != "data":
            raise ValueError(
                f"gpu.compile: compiling is supported in data mode only, not {mode} mode"
            )
        if spec.quantization == "int8-dynamic":
            raise ValueError(
                "gpu.compile: int8-dynamic quantized layers do not compile; choose one of them"
            )
        if gpu.offload == "sequential":
            raise ValueError(
                "gpu.compile: sequential offload moves every layer's weights per call, which "
                "defeats compiled graphs; use offload model or none"
            )
    backend = gpu.attention_backend
    if backend is not None:
        known = attention_backends()
        if known is not None and backend not in known:
            raise ValueError(
                f"gpu.attention_backend: unknown backend {backend!r}; "
                f"choose from {', '.join(sorted(b for b in known if not b.startswith('_')))}"
            )
        if backend.endswith(_DOWNLOADING_SUFFIX):
            raise ValueError(
                f"gpu.attention_backend: {backend} downloads kernels from the hub at load; "
                "install the kernel package and use the backend without _hub"
            )


def check_on_device(spec: Any, device: str) -> str | None:
    """Why the entry's dtype and load options cannot run on `device` ("cpu", "cuda:0"), as
    "field: reason", or None."""
    if not device.startswith("cpu"):
        return None
    gpu: GpuOptions = spec.gpu
    if spec.dtype == "float16":
        return "dtype: float16 lacks CPU kernels for many ops; use float32 or bfloat16"
    if gpu.offload != "none":
        return f"gpu.offload: {gpu.offload} offload needs an accelerator; this worker runs on CPU"
    backend = gpu.attention_backend
    if backend is not None and backend not in CPU_ATTENTION_BACKENDS:
        choices = ", ".join(sorted(CPU_ATTENTION_BACKENDS))
        return f"gpu.attention_backend: {backend} needs CUDA; on CPU choose {choices}"
    return None
