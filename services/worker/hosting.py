"""Which host a registry entry gets: the torch-free echo, one device, or a parallel mode.

This choice lives above `models` and `parallel` so the dependency runs one way: parallel
hosts build on the single-device ones, and `models` never learns that parallel modes exist.
"""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.echo import EchoHost
from mediamesh.worker.models.host import ModelHost, load_single_device_host
from mediamesh.worker.parallel.pipeline_mode import load_pipeline_parallel_host
from mediamesh.worker.parallel.tensor_host import load_tensor_parallel_host


def load_host(spec: ModelSpec, *, models_dir: Path, device: str, checkpoint_dir: Path) -> ModelHost:
    """Loads the model of a registry entry; raises ModelLoadError with the reason."""
    if spec.pipeline == "Echo":
        return EchoHost(spec, device)
    mode = spec.parallelism.mode
    if mode == "pipeline":
        return load_pipeline_parallel_host(
            spec, models_dir=models_dir, checkpoint_dir=checkpoint_dir
        )
    if mode == "tensor":
        return load_tensor_parallel_host(
            spec, models_dir=models_dir, device=device, checkpoint_dir=checkpoint_dir
        )
    return load_single_device_host(
        spec, models_dir=models_dir, device=device, checkpoint_dir=checkpoint_dir
    )
