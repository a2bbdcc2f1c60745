"""A loaded pipeline's step cache: diffusers' cache hooks on its transformer, switchable per call.

The registry's `cache` is turned into the matching diffusers config and enabled on the
transformer at load. A call whose jobs asked for `cache: false` runs with the hooks
removed and gets them back afterwards. Hook state is reset before every call: a call that
stopped early (cancel, preemption) would otherwise leave residuals of another batch size.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from mediamesh.common.registry import ModelSpec
from mediamesh.common.step_cache import (
    FasterCache,
    FirstBlockCache,
    MagCache,
    PyramidAttentionBroadcast,
    StepCacheSpec,
    TaylorSeerCache,
)
from mediamesh.worker.models.memory import ModelLoadError


def has_step_cache(denoiser_class: type) -> bool:
    """Whether diffusers gives this denoiser class cache hooks (its CacheMixin)."""
    return callable(getattr(denoiser_class, "enable_cache", None))


def no_step_cache(spec: ModelSpec, denoiser_class: str) -> str:
    """The refusal of an entry's `cache` on a denoiser without diffusers' cache hooks."""
    import diffusers

    # Which classes have the hooks is diffusers' choice per release, not "transformers": in
    # 0.42 the SD3, PixArt and Stable Audio transformers lack them as every UNet does.
    return (
        f"model {spec.name!r} field cache: its denoiser {denoiser_class} has no diffusers step "
        f"cache (diffusers {diffusers.__version__} has one only on transformers built on its "
        "CacheMixin, such as FluxTransformer2DModel, WanTransformer3DModel and "
        "CogVideoXTransformer3DModel; not on UNets nor on the SD3, PixArt or Stable Audio "
        "transformers); remove `cache` from the entry"
    )


def refuse_uncached_denoiser(spec: ModelSpec, local_dir: Path) -> None:
    """ModelLoadError naming `cache` when the folder's denoiser class has no diffusers cache
    hooks, read from its model_index.json before any weight loads. A folder or class this
    cannot read is left to the load, which says what is wrong with it."""
    found = denoiser_class(local_dir)
    if found is not None and not has_step_cache(found):
        raise ModelLoadError(no_step_cache(spec, found.__name__))


def denoiser_class(local_dir: Path) -> type | None:
    """The class model_index.json names for the pipeline's transformer (else its unet), the
    component the cache hooks go on; None when it cannot be read or imported."""
    try:
        index = json.loads((local_dir / "model_index.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict):
        return None
    for component in ("transformer", "unet"):
        entry = index.get(component)
        if isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry):
            return _import_class(*entry)
    return None


def _import_class(library: str, name: str) -> type | None:
    # diffusers' own classes are top-level; a pipeline's private ones ("audioldm2") live in
    # its pipelines package.
    module_name = "diffusers" if library == "diffusers" else f"diffusers.pipelines.{library}"
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


class StepCache:
    """The cache hooks of one pipeline's transformer, on by default."""

    def __init__(self, spec: ModelSpec, pipeline: Any, denoiser: Any) -> None:
        assert spec.cache is not None
        if not has_step_cache(type(denoiser)):
            raise ModelLoadError(no_step_cache(spec, type(denoiser).__name__))
        self.settings: StepCacheSpec = spec.cache
        self.pipeline = pipeline
        self.denoiser: Any = denoiser
        # MagCache stretches its ratio table to a step count, so it is rebuilt when that changes.
        self.steps = spec.defaults.steps
        try:
            self.denoiser.enable_cache(self._config(self.steps))
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelLoadError(f"model {spec.name!r} field cache: {exc}") from exc

    @contextmanager
    def for_call(self, enabled: bool, steps: int) -> Iterator[None]:
        """Runs one pipeline call with the cache on (`enabled`) or off."""
        if not enabled:
            self.denoiser.disable_cache()
            try:
                yield
            finally:
                self.denoiser.enable_cache(self._config(self.steps))
            return
        if isinstance(self.settings, MagCache) and steps != self.steps:
            self.denoiser.disable_cache()
            self.steps = steps
            self.denoiser.enable_cache(self._config(steps))
        self.denoiser._reset_stateful_cache()
        yield

    def _config(self, steps: int) -> object:
        return cache_config(self.settings, self.pipeline, self.denoiser, steps)


def cache_config(settings: StepCacheSpec, pipeline: Any, denoiser: Any, steps: int) -> object:
    """The diffusers config of a registry cache entry, for calls of `steps` steps."""
    from diffusers.hooks import (
        FasterCacheConfig,
        FirstBlockCacheConfig,
        MagCacheConfig,
        PyramidAttentionBroadcastConfig,
        TaylorSeerCacheConfig,
    )

    values = settings.model_dump(exclude={"kind"})

    def current_timestep() -> int:
        # The timestep-windowed caches ask the running pipeline where its loop is.
        return int(pipeline.current_timestep)

    if isinstance(settings, FirstBlockCache):
        return FirstBlockCacheConfig(**values)
    if isinstance(settings, TaylorSeerCache):
        return TaylorSeerCacheConfig(**values)
    if isinstance(settings, MagCache):
        ratios = settings.mag_ratios
        if ratios == "flux":
            from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

            ratios = FLUX_MAG_RATIOS
        values.update(mag_ratios=torch.as_tensor(ratios), num_inference_steps=steps)
        return MagCacheConfig(**values)
    if isinstance(settings, FasterCache):
        # A guidance-distilled transformer (FLUX) has no unconditional branch to skip.
        distilled = bool(getattr(denoiser.config, "guidance_embeds", False))
        return FasterCacheConfig(
            **values, current_timestep_callback=current_timestep, is_guidance_distilled=distilled
        )
    if isinstance(settings, PyramidAttentionBroadcast):
        return PyramidAttentionBroadcastConfig(**values, current_timestep_callback=current_timestep)
    raise ModelLoadError(f"unknown cache kind {settings!r}")


@contextmanager
def cache_for_call(cache: StepCache | None, use_cache: bool, steps: int) -> Iterator[None]:
    """The cache switched for one call; nothing to switch for a model without a cache."""
    if cache is None:
        yield
        return
    with cache.for_call(use_cache, steps):
        yield
