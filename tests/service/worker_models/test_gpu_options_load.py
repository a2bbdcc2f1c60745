"""`gpu:` options applied at load on flux-tiny, on the CPU: the same pixels as a plain load
(compiled with the tracing-only eager backend; inductor runs in `make gpu-check`)."""

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

# Compiled (traced) graphs may fuse float operations differently: one 8-bit level.
TOLERANCE = 1


def with_fields(spec: ModelSpec, **fields: Any) -> ModelSpec:
    return ModelSpec.model_validate({**spec.model_dump(), **fields})


def pixels(host: ModelHost) -> np.ndarray:
    job = job_for(host.spec, "j", seed=5)
    (finished,) = of(run(host, [job]), "j", JobFinished)
    assert isinstance(finished, JobFinished)
    return png_pixels(finished.data)


@pytest.mark.parametrize("mode", ["regional", "full"])
def test_options_apply_and_keep_the_pixels(
    mode: str, host_for, registry_spec, models_dir: Path, tmp_path: Path
) -> None:
    reference = pixels(host_for("flux-tiny"))
    gpu = {
        "attention_backend": "native",
        "vae": {"tiling": True, "slicing": True},
        "compile": {"mode": mode, "backend": "eager"},
    }
    spec = with_fields(registry_spec("flux-tiny"), gpu=gpu)
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    try:
        transformer = host.pipeline.transformer
        blocks = list(transformer.transformer_blocks) + list(transformer.single_transformer_blocks)
        if mode == "regional":
            assert all(block._compiled_call_impl is not None for block in blocks)
            assert transformer._compiled_call_impl is None
        else:
            assert transformer._compiled_call_impl is not None
        assert host.pipeline.vae.use_tiling and host.pipeline.vae.use_slicing
        assert np.abs(pixels(host) - reference).max() <= TOLERANCE
    finally:
        host.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dtype": "float16"}, "'flux-tiny' field dtype: float16"),
        ({"gpu": {"offload": "model"}}, "'flux-tiny' field gpu.offload"),
        ({"gpu": {"attention_backend": "sage"}}, "'flux-tiny' field gpu.attention_backend"),
    ],
)
def test_cpu_worker_refuses_accelerator_options(
    fields: dict[str, Any], message: str, registry_spec, models_dir: Path, tmp_path: Path
) -> None:
    spec = with_fields(registry_spec("flux-tiny"), **fields)
    with pytest.raises(ModelLoadError, match=message):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
