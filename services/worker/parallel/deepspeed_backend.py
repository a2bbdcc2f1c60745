"""`backend: deepspeed`: DeepSpeed inference's automatic tensor parallelism (CUDA).

DeepSpeed is an optional extra (`mediamesh[deepspeed]`), imported only when asked for.
On CPU only tp_size 1 is allowed: DeepSpeed's CPU all-reduce goes through its
shared-memory communication op, which crashes on CPU-only builds, so a sharded CPU model
cannot be served. tp_size 1 on CPU is tested (tests/service/worker_models/test_deepspeed_cpu.py);
larger groups need CUDA and are untested here.
"""

from __future__ import annotations

from diffusers import DiffusionPipeline

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.host import TORCH_DTYPES
from mediamesh.worker.models.memory import ModelLoadError


def check_deepspeed(spec: ModelSpec, device: str) -> None:
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        raise ModelLoadError(
            f"model {spec.name!r}: backend deepspeed needs the optional 'deepspeed' package "
            "(pip install 'mediamesh[deepspeed]')"
        ) from None
    devices = spec.parallelism.devices or [device]
    if not devices[0].startswith("cuda") and spec.parallelism.size != 1:
        raise ModelLoadError(
            f"model {spec.name!r}: deepspeed on CPU supports tp_size 1 only "
            "(its shared-memory all-reduce crashes on CPU)"
        )


def shard_with_deepspeed(pipeline: DiffusionPipeline, spec: ModelSpec, size: int) -> None:
    """Collective: replaces the transformer's Linear layers with DeepSpeed's TP layers."""
    import deepspeed

    engine = deepspeed.init_inference(
        pipeline.transformer,
        tensor_parallel={"tp_size": size},
        dtype=TORCH_DTYPES[spec.dtype],
        replace_with_kernel_inject=False,
    )
    pipeline.register_modules(transformer=engine.module)
