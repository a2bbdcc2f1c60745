"""Step caches on flux-tiny through the real load path: every kind runs, `cache: false`
gives the uncached pixels exactly, and the cache comes back after such a call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFinished
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.models.memory import ModelLoadError

STEPS = 6
KINDS: dict[str, dict[str, Any]] = {
    "first-block": {"threshold": 0.5},
    "taylorseer": {"cache_interval": 2, "disable_cache_before_step": 1},
    "mag": {"threshold": 0.5, "retention_ratio": 0.0},
    "faster": {"spatial_attention_timestep_skip_range": [-1, 1000]},
    "pab": {"spatial_attention_timestep_skip_range": [0, 1000]},
}


def with_cache(spec: ModelSpec, cache: dict[str, Any]) -> ModelSpec:
    return ModelSpec.model_validate({**spec.model_dump(), "cache": cache})


def pixels(host: ModelHost, *, use_cache: bool = True, seed: int = 7) -> np.ndarray:
    job = job_for(host.spec, f"j{seed}{use_cache}", seed=seed, steps=STEPS, use_cache=use_cache)
    (finished,) = of(run(host, [job]), job.job_id, JobFinished)
    assert isinstance(finished, JobFinished)
    return png_pixels(finished.data)


@pytest.fixture(scope="module")
def reference(host_for) -> np.ndarray:
    return pixels(host_for("flux-tiny"))


@pytest.mark.parametrize("kind", list(KINDS))
def test_cache_kind_runs_and_switches_off_per_request(
    kind: str, registry_spec, models_dir: Path, tmp_path: Path, reference: np.ndarray
) -> None:
    spec = with_cache(registry_spec("flux-tiny"), {"kind": kind, **KINDS[kind]})
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    try:
        assert host.pipeline.transformer.is_cache_enabled
        cached = pixels(host)
        assert np.array_equal(pixels(host, use_cache=False), reference)
        # The hooks are back after the uncached call, and their state starts clean.
        assert host.pipeline.transformer.is_cache_enabled
        assert np.array_equal(pixels(host), cached)
        if kind == "taylorseer":
            # Every other step is predicted: the cache must show in the pixels.
            assert np.abs(cached - reference).max() > 0
    finally:
        host.close()


def test_cached_and_uncached_jobs_of_one_batch_run_apart(
    registry_spec, models_dir: Path, tmp_path: Path, reference: np.ndarray
) -> None:
    spec = with_cache(registry_spec("flux-tiny"), {"kind": "taylorseer", **KINDS["taylorseer"]})
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    try:
        jobs = [
            job_for(spec, "cached", seed=7, steps=STEPS),
            job_for(spec, "full", seed=7, steps=STEPS, use_cache=False),
        ]
        events = run(host, jobs)
        (full,) = of(events, "full", JobFinished)
        (cached,) = of(events, "cached", JobFinished)
        assert isinstance(full, JobFinished) and isinstance(cached, JobFinished)
        assert np.array_equal(png_pixels(full.data), reference)
        assert not np.array_equal(png_pixels(cached.data), reference)
    finally:
        host.close()


def test_unet_model_refuses_a_cache(registry_spec, models_dir: Path, tmp_path: Path) -> None:
    spec = with_cache(registry_spec("sdxl-tiny"), {"kind": "first-block"})
    with pytest.raises(ModelLoadError, match="'sdxl-tiny' field cache"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
