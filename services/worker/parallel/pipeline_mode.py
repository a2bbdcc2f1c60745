"""Pipeline parallelism: a model's layers spread over devices (and disk) by accelerate.

`device_map: balanced` places whole pipeline components (text encoders, transformer, VAE)
on different GPUs; diffusers balances over GPUs only, so on a CPU-only host everything
stays on the CPU. `auto`/`sequential` split the denoiser itself layer by layer within
`max_memory`, spilling what does not fit to `offload_folder` on disk; the layers then
run in order, each on its device, and the output equals the single-device result.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from pathlib import Path

import diffusers
import torch

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.host import (
    TORCH_DTYPES,
    dtype_keyword,
    host_class,
    load_pipeline,
)
from mediamesh.worker.models.memory import ModelLoadError, device_memory, one_line
from mediamesh.worker.models.preflight import refuse_unstartable

log = logging.getLogger(__name__)

# The pipeline component that holds the denoiser: a transformer (Flux, SD3, PixArt, video
# models) or a UNet (SDXL, AudioLDM2).
DENOISERS = ("transformer", "unet")


def accelerate_max_memory(limits: dict[str, str | int]) -> dict[int | str, str | int]:
    """Registry keys ("cuda:1", "cpu", "disk") to accelerate's (1, "cpu", "disk")."""
    converted: dict[int | str, str | int] = {}
    for device, limit in limits.items():
        if device.startswith("cuda:"):
            converted[int(device.split(":", 1)[1])] = limit
        elif device == "cuda":
            converted[0] = limit
        else:
            converted[device] = limit
    return converted


def gpu_index(device: str) -> int | None:
    """accelerate's index of a CUDA device name ("cuda" is the current one, 0 at start)."""
    if device == "cuda":
        return 0
    if device.startswith("cuda:"):
        return int(device.split(":", 1)[1])
    return None


def placement_memory(spec: ModelSpec) -> dict[int | str, str | int] | None:
    """accelerate's `max_memory` for the entry: its own caps, or, when it lists devices and
    no caps, the free memory of those GPUs now (and the host's, for what spills). Left to
    None, accelerate and diffusers spread over every visible GPU, those of other workers
    and models included. ModelLoadError naming parallelism.max_memory for a cap on a GPU
    that parallelism.devices does not list."""
    options = spec.parallelism
    listed = sorted({i for d in options.devices if (i := gpu_index(d)) is not None})
    if options.max_memory:
        strays = [d for d in options.max_memory if gpu_index(d) not in (None, *listed)]
        if options.devices and strays:
            raise ModelLoadError(
                f"model {spec.name!r} field parallelism.max_memory: {', '.join(strays)} "
                f"not in parallelism.devices ({', '.join(options.devices)}); cap only the "
                "listed devices, or list these too"
            )
        return accelerate_max_memory(options.max_memory)
    if not listed:
        return None
    budget: dict[int | str, str | int] = {i: device_memory(f"cuda:{i}")[1] for i in listed}
    budget["cpu"] = device_memory("cpu")[1]
    return budget


def load_pipeline_parallel_host(
    spec: ModelSpec, *, models_dir: Path, checkpoint_dir: Path
) -> DiffusionHost:
    refuse_unstartable(spec, Path(spec.resolved_source(models_dir)))
    options = spec.parallelism
    devices = options.devices or ["cpu"]
    max_memory = placement_memory(spec)
    family = host_class(spec)
    if options.device_map == "balanced":
        pipeline = load_pipeline(
            spec, models_dir=models_dir, device=None, device_map="balanced", max_memory=max_memory
        )
    else:
        role, denoiser = _load_split_denoiser(spec, models_dir, max_memory, options.offload_folder)
        pipeline = load_pipeline(spec, models_dir=models_dir, device=None, **{role: denoiser})
        # Everything but the split denoiser lives on the first device, where the
        # denoiser's accelerate hooks also return their outputs.
        for name, component in pipeline.components.items():
            if name != role and isinstance(component, torch.nn.Module):
                component.to(devices[0])
    return family(
        spec, pipeline, device=devices[0], checkpoint_dir=checkpoint_dir, device_ids=devices
    )


def own_offload_folder(model: str, offload_folder: str | None) -> str | None:
    """A new folder under `offload_folder`/`model` for this load alone, removed when the
    process exits. accelerate names its files after the layers (`index.json`,
    `<layer>.dat`), so two models, or two workers on one disk, offloading into the same
    folder would overwrite each other's weights and compute with garbage."""
    if not offload_folder:
        return None
    parent = Path(offload_folder) / model
    parent.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="load-", dir=parent)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _load_split_denoiser(
    spec: ModelSpec,
    models_dir: Path,
    max_memory: dict[int | str, str | int] | None,
    offload_folder: str | None,
) -> tuple[str, torch.nn.Module]:
    """The denoiser's component name and the denoiser, its layers placed by accelerate."""
    source = spec.resolved_source(models_dir)
    local = Path(source).is_dir()
    pipeline_class = getattr(diffusers, spec.pipeline, diffusers.DiffusionPipeline)
    try:
        index = pipeline_class.load_config(source, local_files_only=local)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"model {spec.name!r} (source {source}): cannot read model_index.json: {one_line(exc)}"
        ) from exc
    role = next((name for name in DENOISERS if name in index), None)
    if role is None:
        raise ModelLoadError(
            f"model {spec.name!r}: parallelism.device_map {spec.parallelism.device_map} splits "
            f"the denoiser, and {spec.pipeline} has no {' or '.join(DENOISERS)} component; "
            "use device_map balanced"
        )
    library, class_name = index[role]
    if library != "diffusers":
        raise ModelLoadError(f"model {spec.name!r}: denoiser class {library}.{class_name}")
    model_class = getattr(diffusers, class_name)
    try:
        folder = own_offload_folder(spec.name, offload_folder)
    except OSError as exc:
        raise ModelLoadError(
            f"model {spec.name!r} field parallelism.offload_folder: cannot make a folder "
            f"under {offload_folder}: {one_line(exc)}"
        ) from exc
    try:
        denoiser: torch.nn.Module = model_class.from_pretrained(
            source,
            subfolder=role,
            **{dtype_keyword(): TORCH_DTYPES[spec.dtype]},
            device_map=spec.parallelism.device_map,
            max_memory=max_memory,
            offload_folder=folder,
            local_files_only=local,
        )
    except Exception as exc:
        # accelerate and diffusers fail a split they cannot make with whatever the layer
        # placement raised; the worker's one line names the model and the class.
        raise ModelLoadError(
            f"model {spec.name!r}: cannot split {class_name}: {one_line(exc)}"
        ) from exc
    return role, denoiser
