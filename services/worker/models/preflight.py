"""What a model's load would refuse that is known without its weights, checked at start.

The worker runs these for every hosted model before any loads, cold ones included: under
residency limits a model hosted cold would otherwise find out at its first batch, after
evicting a healthy model to make room for a load that cannot work, and fail every job of
it while the mesh called it ready. The residency runs them again before each cold load,
for the same reason (the folder may have gone since).
"""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.gpu_setup import refuse_on_device
from mediamesh.worker.models.host import host_class, local_folder, refuse_quantization_on_device
from mediamesh.worker.models.step_cache import refuse_uncached_denoiser


def refuse_unloadable(spec: ModelSpec, *, models_dir: Path, device: str) -> None:
    """ModelLoadError naming the model (and the field, where one is at fault) when its load
    on `device` would fail whatever the memory: an absent folder, a class diffusers lacks, a
    dtype or option without kernels on the device, a cache its denoiser cannot take."""
    if spec.pipeline == "Echo":
        return
    local_dir = local_folder(spec, models_dir)
    # Parallel modes place their ranks on their own devices and check them as they load,
    # at start (they are never hosted cold).
    if spec.parallelism.mode == "data":
        host_class(spec)
        refuse_on_device(spec, device)
        refuse_quantization_on_device(spec, device)
    if spec.cache is not None:
        refuse_uncached_denoiser(spec, local_dir)
