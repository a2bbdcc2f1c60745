"""Builds the tiny offline models of the default registry with random, seeded weights.

Each model is written with `save_pretrained` exactly like a hub checkpoint, so the worker
loads it through the same `from_pretrained` path it uses for real models. A `.complete`
marker is written last: a directory without it is a crashed build and is rebuilt.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from diffusers import DiffusionPipeline

from mediamesh.worker.models.tiny_adapters import build_tiny_adapters, ensure_tiny_adapters
from mediamesh.worker.models.tiny_audio_families import build_audioldm2
from mediamesh.worker.models.tiny_families import (
    build_flux,
    build_stable_audio,
    build_wan,
)
from mediamesh.worker.models.tiny_image_families import (
    build_cogvideox,
    build_pixart_sigma,
    build_sd3,
    build_sdxl,
)
from mediamesh.worker.models.tiny_input_families import build_cogvideox_i2v

log = logging.getLogger(__name__)

COMPLETE_MARKER = ".complete"
# Models that exist in code only and need no files.
BUILTIN = {"echo"}
BUILD_SEED = 20240601

BUILDERS: dict[str, Callable[[], DiffusionPipeline]] = {
    "flux-tiny": lambda: build_flux("tiny"),
    "flux-small": lambda: build_flux("small"),
    "wan-tiny": build_wan,
    "stable-audio-tiny": build_stable_audio,
    "sdxl-tiny": build_sdxl,
    "sd3-tiny": build_sd3,
    "pixart-tiny": build_pixart_sigma,
    "cogvideox-tiny": build_cogvideox,
    "cogvideox-i2v-tiny": build_cogvideox_i2v,
    "audioldm2-tiny": build_audioldm2,
}


def is_complete(model_dir: Path) -> bool:
    return (model_dir / COMPLETE_MARKER).is_file()


def build_models(out_dir: Path, names: list[str] | None = None, force: bool = False) -> list[Path]:
    """Writes each named model (all buildable ones by default) to `out_dir/<name>`.

    Builtin models (`echo`) are skipped. Returns the model directories.
    """
    unknown = [n for n in names or [] if n not in BUILDERS and n not in BUILTIN]
    if unknown:
        raise ValueError(f"no builder for {', '.join(unknown)}; known: {', '.join(BUILDERS)}")
    wanted = list(BUILDERS) if names is None else [n for n in names if n in BUILDERS]
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in wanted:
        target = out_dir / name
        if is_complete(target) and not force:
            ensure_tiny_adapters(out_dir, name)
            written.append(target)
            continue
        if target.exists():
            shutil.rmtree(target)
        # The same seed per model, not one stream over all: a model's weights must not
        # depend on which other models were built in the same call.
        torch.manual_seed(BUILD_SEED)
        pipeline = BUILDERS[name]()
        pipeline.save_pretrained(target, safe_serialization=True)
        # Its LoRA adapters (tiny_adapters.py) go next to it, before the model counts as built.
        build_tiny_adapters(pipeline, out_dir, name, force=True)
        (target / COMPLETE_MARKER).write_text(f"{count_parameters(pipeline)}\n")
        log.info("built %s (%d parameters) at %s", name, count_parameters(pipeline), target)
        written.append(target)
    return written


def count_parameters(pipeline: DiffusionPipeline) -> int:
    total = 0
    for component in pipeline.components.values():
        if isinstance(component, torch.nn.Module):
            total += sum(p.numel() for p in component.parameters())
    return total
