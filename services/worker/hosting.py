"""Which host a registry entry gets: the torch-free echo, one device, or a parallel mode.

This choice lives above `models` and `parallel` so the dependency runs one way: parallel
hosts build on the single-device ones, and `models` never learns that parallel modes exist.
"""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.adapters import DEFAULT_MAX_LOADED_ADAPTERS
from mediamesh.common.registry import ModelSpec
from mediamesh.worker import metrics
from mediamesh.worker.models.adapters import AdapterCache
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.echo import EchoHost
from mediamesh.worker.models.host import ModelHost, load_single_device_host
from mediamesh.worker.parallel.context_host import load_context_parallel_host
from mediamesh.worker.parallel.pipeline_mode import load_pipeline_parallel_host
from mediamesh.worker.parallel.tensor_host import load_tensor_parallel_host


def load_host(
    spec: ModelSpec,
    *,
    models_dir: Path,
    device: str,
    checkpoint_dir: Path,
    max_loaded_adapters: int = DEFAULT_MAX_LOADED_ADAPTERS,
) -> ModelHost:
    """Loads the model of a registry entry; raises ModelLoadError with the reason."""
    if spec.pipeline == "Echo":
        return EchoHost(spec, device)
    mode = spec.parallelism.mode
    if mode == "pipeline":
        return load_pipeline_parallel_host(
            spec, models_dir=models_dir, checkpoint_dir=checkpoint_dir
        )
    if mode == "context":
        return load_context_parallel_host(
            spec, models_dir=models_dir, device=device, checkpoint_dir=checkpoint_dir
        )
    if mode == "tensor":
        return load_tensor_parallel_host(
            spec, models_dir=models_dir, device=device, checkpoint_dir=checkpoint_dir
        )
    host = load_single_device_host(
        spec, models_dir=models_dir, device=device, checkpoint_dir=checkpoint_dir
    )
    attach_adapters(host, models_dir=models_dir, max_loaded=max_loaded_adapters)
    return host


def attach_adapters(host: DiffusionHost, *, models_dir: Path, max_loaded: int) -> None:
    """Lets a single-device host apply its entry's LoRA adapters (loaded on first use).

    Only the data mode gets them: peft layers on a pipeline spread by a device_map or
    split over tensor-parallel ranks are not supported, and such hosts refuse adapter jobs."""
    if host.spec.adapters:
        # Exported at 0 from the start, so a dashboard's rate() sees the first load.
        metrics.ADAPTER_LOADS.labels(host.spec.name)
        host.adapters = AdapterCache(
            host.spec,
            host.pipeline,
            models_dir=models_dir,
            max_loaded=max_loaded,
            observe=_observe_adapter_load,
        )


def _observe_adapter_load(model: str, seconds: float) -> None:
    metrics.ADAPTER_LOADS.labels(model).inc()
    metrics.ADAPTER_LOAD_SECONDS.labels(model).observe(seconds)
