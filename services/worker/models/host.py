"""The contract between the worker and a loaded model, and how one model loads on one device.

A host owns one routing unit: one or more devices the model occupies. `run_batch` blocks
in a worker thread (never on an event loop), reports through `emit`, gives every job
exactly one terminal event and raises nothing but DeviceGroupLost (its devices are gone:
the jobs it leaves unreported go back in line). Hosts spread over several devices live in
`worker.parallel`, which builds on this module; `worker.hosting` picks one per entry.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import torch
from diffusers import DiffusionPipeline

from mediamesh.common.hub import cached_snapshot, is_hub_source, missing_message
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobParams
from mediamesh.worker.core.batch import ControlView, Emit
from mediamesh.worker.models.device_lookups import mark_without_group_offloading
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.gpu_setup import apply_gpu_options, place, refuse_on_device
from mediamesh.worker.models.load_checks import (
    check_loaded_pipeline,
    check_no_meta_tensors,
    loading_hint,
)
from mediamesh.worker.models.memory import (
    DTYPE_BYTES,
    ModelLoadError,
    check_fits,
    checkpoint_parameters,
    one_line,
)
from mediamesh.worker.models.model_multiple import check_size_multiple

log = logging.getLogger(__name__)

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelHost(Protocol):
    spec: ModelSpec
    device_ids: list[str]

    def run_batch(self, jobs: list[JobParams], control: ControlView, emit: Emit) -> None: ...

    def close(self) -> None: ...


def host_class(spec: ModelSpec) -> type[DiffusionHost]:
    """The host for a registry entry: one generic host serves every diffusers pipeline
    class; whether it has a usable step hook is checked when the pipeline is loaded."""
    import diffusers

    from mediamesh.worker.models.pipeline_host import PipelineHost

    pipeline_class = getattr(diffusers, spec.pipeline, None)
    if not (isinstance(pipeline_class, type) and issubclass(pipeline_class, DiffusionPipeline)):
        raise ModelLoadError(
            f"model {spec.name!r}: {spec.pipeline!r} is not a diffusers pipeline class "
            f"(diffusers {diffusers.__version__}); the builtin Echo is the other choice"
        )
    return PipelineHost


def load_single_device_host(
    spec: ModelSpec, *, models_dir: Path, device: str, checkpoint_dir: Path
) -> DiffusionHost:
    """Data mode: the whole pipeline on the worker's one device; raises ModelLoadError."""
    family = host_class(spec)
    pipeline = load_pipeline(spec, models_dir=models_dir, device=device)
    host = family(spec, pipeline, device=device, checkpoint_dir=checkpoint_dir)
    if host.previewer is not None and spec.preview.vae:
        host.previewer.load_tiny_vae(models_dir, device)
    return host


def load_pipeline(
    spec: ModelSpec, *, models_dir: Path, device: str | None, **options: object
) -> DiffusionPipeline:
    """`from_pretrained` of the spec's pipeline class, on `device` (None: leave placement
    to `options`, e.g. an accelerate device_map)."""
    import diffusers

    source = spec.resolved_source(models_dir)
    local_dir = local_folder(spec, models_dir)
    if device is not None:
        refuse_on_device(spec, device)
    # Offloaded weights stay in host memory; the device holds one component at a time.
    if device is not None and spec.gpu.offload == "none":
        parameters = checkpoint_parameters(spec.name, local_dir, source)
        check_fits(spec.name, parameters * DTYPE_BYTES[spec.dtype], device)
    if device is not None:
        refuse_quantization_on_device(spec, device)
    pipeline_class = getattr(diffusers, spec.pipeline, diffusers.DiffusionPipeline)
    kwargs: dict[str, object] = {dtype_keyword(): TORCH_DTYPES[spec.dtype]}
    if spec.variant:
        kwargs["variant"] = spec.variant
    kwargs.update(options)
    kwargs["local_files_only"] = True
    try:
        pipeline = pipeline_class.from_pretrained(str(local_dir), **kwargs)
    except Exception as exc:
        # diffusers fails on a folder it cannot load with whatever the first component
        # raises (AttributeError for a class that is not the folder's, a safetensors error
        # for a file cut short); none of it says which entry, so the worker's one line does.
        raise ModelLoadError(
            f"model {spec.name!r} (source {source}): cannot be loaded as {spec.pipeline}: "
            f"{one_line(exc)}; {loading_hint(spec, local_dir)}"
        ) from exc
    passed = set(options)
    check_loaded_pipeline(spec, pipeline, source=source, local_dir=local_dir, passed=passed)
    # An accelerate device map may leave weights on the meta device on purpose (offloaded
    # to disk, restored by its hooks).
    if "device_map" not in options:
        check_no_meta_tensors(spec, pipeline, source=source, passed=passed)
    check_size_multiple(spec, pipeline)
    if device is not None:
        place(spec, pipeline, device)
    if spec.quantization == "int8-dynamic":
        quantize_int8_dynamic(pipeline.transformer)
    apply_gpu_options(spec, pipeline)
    # Last: after placement and compilation, no hook is added any more.
    mark_without_group_offloading(pipeline)
    return pipeline


def local_folder(spec: ModelSpec, models_dir: Path) -> Path:
    """The folder `from_pretrained` loads the entry from; ModelLoadError when it is absent."""
    source = spec.resolved_source(models_dir)
    # Hub entries load from their cached snapshot folder, never the network (`common.hub`).
    local_dir = Path(source) if Path(source).is_dir() else cached_snapshot(spec)
    if local_dir is None and Path(source).is_file():
        raise ModelLoadError(
            f"model {spec.name!r} field source: {source} is a file, not a diffusers folder "
            "(the save_pretrained layout, with model_index.json); a single-file checkpoint "
            "is not loaded as it stands: load it once with the pipeline class's "
            "from_single_file and save_pretrained it, then point source at that folder"
        )
    if spec.source.startswith("{models_dir}") and local_dir is None:
        raise ModelLoadError(
            f"model {spec.name!r}: {source} does not exist; build it with `mediamesh models build`"
        )
    if local_dir is None:
        if not is_hub_source(spec, models_dir):
            raise ModelLoadError(f"model {spec.name!r}: {source} does not exist")
        raise ModelLoadError(missing_message(spec))
    return local_dir


def refuse_quantization_on_device(spec: ModelSpec, device: str) -> None:
    """ModelLoadError naming the field when the entry's quantization has no kernels there."""
    if spec.quantization == "int8-dynamic" and device != "cpu":
        raise ModelLoadError(
            f"model {spec.name!r} field quantization: int8-dynamic has CPU kernels only, "
            f"not {device}"
        )


def dtype_keyword() -> str:
    # diffusers renamed `torch_dtype` to `dtype` (0.42 warns on the old name); releases
    # before the rename have no resolver and only know `torch_dtype`.
    try:
        from diffusers.utils.deprecation_utils import _resolve_dtype  # noqa: F401
    except ImportError:
        return "torch_dtype"
    return "dtype"


def quantize_int8_dynamic(module: torch.nn.Module) -> None:
    """Int8 weights with activations quantized per batch at run time, Linear layers only."""
    from torch.ao.quantization import quantize_dynamic

    quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
