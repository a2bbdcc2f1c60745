"""Tiny random LoRA adapters for the tiny models, built offline with peft.

Each adapter is a peft `LoraConfig` on the denoiser's attention projections with seeded,
nonzero weights (a freshly initialised LoRA has B = 0 and changes nothing), saved in the
diffusers LoRA format by the pipeline class's own `save_lora_weights`, so the worker reads
it back through `load_lora_weights` exactly like an adapter from the hub.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from diffusers import DiffusionPipeline, ModelMixin

# Attention projections every tiny denoiser (Flux transformer, SDXL UNet) has.
TARGET_MODULES = ["to_q", "to_k", "to_v", "to_out.0"]
LORA_RANK = 4
# Standard deviation of the random LoRA weights: large enough that scale 1 visibly moves
# a tiny model's output, small enough that it stays an image rather than noise.
WEIGHT_STD = 0.2
COMPLETE_MARKER = ".complete"

# model -> (adapter name, seed): the adapters `mediamesh models build` writes for it, each
# to `<models_dir>/<model>-lora-<adapter>` (the registry entries point there).
TINY_ADAPTERS: dict[str, tuple[tuple[str, int], ...]] = {
    "flux-tiny": (("style", 101), ("style2", 202)),
    "sdxl-tiny": (("style", 303), ("style2", 404)),
}


def adapter_dir(out_dir: Path, model: str, adapter: str) -> Path:
    """Where the tiny adapter `adapter` of `model` is written."""
    return out_dir / f"{model}-lora-{adapter}"


def _denoiser_argument(pipeline: DiffusionPipeline) -> tuple[ModelMixin, str]:
    """The denoiser and the `save_lora_weights` keyword its layers go under."""
    for name in ("transformer", "unet"):
        module = getattr(pipeline, name, None)
        if isinstance(module, ModelMixin):
            return module, f"{name}_lora_layers"
    raise ValueError(f"{type(pipeline).__name__} has no transformer or unet to adapt")


def save_random_lora(pipeline: DiffusionPipeline, target: Path, seed: int) -> None:
    """Write a random LoRA for `pipeline`'s denoiser to `target` (diffusers format).

    The adapter is attached to the pipeline's denoiser only while its weights are read,
    then removed again, so the pipeline is left as it was."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    denoiser, keyword = _denoiser_argument(pipeline)
    name = "mediamesh_build"
    config = LoraConfig(
        r=LORA_RANK, lora_alpha=LORA_RANK, target_modules=TARGET_MODULES, init_lora_weights=False
    )
    denoiser.add_adapter(config, adapter_name=name)
    try:
        generator = torch.Generator("cpu").manual_seed(seed)
        with torch.no_grad():
            for parameter_name, parameter in denoiser.named_parameters():
                if "lora_" in parameter_name and f".{name}." in parameter_name:
                    noise = torch.randn(parameter.shape, generator=generator) * WEIGHT_STD
                    parameter.copy_(noise.to(parameter.dtype))
        layers = get_peft_model_state_dict(denoiser, adapter_name=name)
        if target.exists():
            shutil.rmtree(target)
        type(pipeline).save_lora_weights(target, **{keyword: layers}, safe_serialization=True)
    finally:
        denoiser.delete_adapters(name)
    (target / COMPLETE_MARKER).write_text(f"{sum(t.numel() for t in layers.values())}\n")


def build_tiny_adapters(
    pipeline: DiffusionPipeline, out_dir: Path, model: str, force: bool = False
) -> list[Path]:
    """Write the tiny adapters of `model` (none when it has none); returns their folders."""
    written = []
    for adapter, seed in TINY_ADAPTERS.get(model, ()):
        target = adapter_dir(out_dir, model, adapter)
        if force or not (target / COMPLETE_MARKER).is_file():
            save_random_lora(pipeline, target, seed)
        written.append(target)
    return written


def ensure_tiny_adapters(out_dir: Path, model: str) -> list[Path]:
    """Write the missing tiny adapters of an already built `model`, loading it only when
    one is missing (a models folder built before adapters existed)."""
    wanted = TINY_ADAPTERS.get(model, ())
    missing = [
        a for a, _ in wanted if not (adapter_dir(out_dir, model, a) / COMPLETE_MARKER).is_file()
    ]
    if missing:
        pipeline = DiffusionPipeline.from_pretrained(out_dir / model, local_files_only=True)
        build_tiny_adapters(pipeline, out_dir, model)
    return [adapter_dir(out_dir, model, a) for a, _ in wanted]
