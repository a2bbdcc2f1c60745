"""Loading a context-parallel group: one routing unit over ulysses * ring ranks.

The group runs exactly like a tensor-parallel one (`tensor_host`): rank 0 speaks gRPC and
hands each batch to the helper ranks, and cancel/preempt flags are agreed at every step.
Only the split differs (`context_parallel`). Rank 0 loads its pipeline before any helper
starts, so a model without a context-parallel plan is refused without spawning ranks.
"""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.host import load_pipeline
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.preflight import refuse_unstartable
from mediamesh.worker.parallel.context_parallel import check_context_support
from mediamesh.worker.parallel.tensor_host import (
    TensorParallelHost,
    refuse_shared_gpus,
    start_rank_group,
)


def load_context_parallel_host(
    spec: ModelSpec, *, models_dir: Path, device: str, checkpoint_dir: Path
) -> TensorParallelHost:
    """Raises ModelLoadError, naming the entry and field, for a model context mode cannot split."""
    refuse_unstartable(spec, Path(spec.resolved_source(models_dir)))
    options = spec.parallelism
    devices = options.devices or [device] * options.ranks
    if len(devices) != options.ranks:
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.devices: {len(devices)} devices for "
            f"{options.ranks} ranks"
        )
    # Before rank 0 loads anything: a group NCCL cannot form costs nothing to refuse.
    refuse_shared_gpus(spec, devices)
    pipeline = load_pipeline(spec, models_dir=models_dir, device=devices[0])
    check_context_support(spec, pipeline, devices[0])
    return start_rank_group(
        spec,
        devices=devices,
        models_dir=models_dir,
        checkpoint_dir=checkpoint_dir,
        pipeline=pipeline,
    )
