"""`backend: deepspeed` on CPU: tp_size 1 serves, larger groups are refused with the reason."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobFinished, JobParams
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.memory import ModelLoadError


def _with_parallelism(spec, **changes):
    # Adapters need the data mode: parallel copies leave the entry's out.
    parallelism = spec.parallelism.model_copy(update=changes)
    return spec.model_copy(update={"parallelism": parallelism, "adapters": ()})


def _render(host, seed: int = 3) -> np.ndarray:
    job = JobParams(
        "j", GenerationParams("a fox", steps=3, seed=seed, width=64, height=64, guidance_scale=3.5)
    )
    events: list = []
    host.run_batch([job], BatchControl(["j"]), events.append)
    (done,) = [e for e in events if isinstance(e, JobFinished)]
    return np.asarray(Image.open(io.BytesIO(done.data)), dtype=int)


def test_deepspeed_tp1_on_cpu_matches_data_mode(models_dir, registry_spec, tmp_path):
    data = load_host(
        registry_spec("flux-tiny"), models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path
    )
    expected = _render(data)
    data.close()
    spec = _with_parallelism(registry_spec("flux-tiny"), mode="tensor", size=1, backend="deepspeed")
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    try:
        assert np.abs(_render(host) - expected).max() <= 1
    finally:
        host.close()


def test_deepspeed_on_cpu_refuses_more_than_one_rank(models_dir, registry_spec, tmp_path):
    spec = _with_parallelism(registry_spec("flux-tiny"), mode="tensor", size=2, backend="deepspeed")
    with pytest.raises(ModelLoadError, match="tp_size 1 only"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
