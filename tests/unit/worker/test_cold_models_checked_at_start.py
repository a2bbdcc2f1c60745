"""With residency limits, a hosted model that could never load refuses the worker's start,
naming the model and the field, as it does without limits: it is not left to fail every job
at its first batch, after evicting a healthy model. Fake folders stand in for checkpoints:
the checks read model_index.json and the safetensors headers, never the weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings
from mediamesh.worker.main import load_hosts
from mediamesh.worker.models.memory import ModelLoadError


def fake_folder(root: Path, component: str, class_name: str, parameters: int = 10) -> Path:
    """A checkpoint folder with a model_index.json and one small weight file."""
    folder = root / f"{component}-{class_name}"
    (folder / component).mkdir(parents=True)
    index = {"_class_name": "AnyPipeline", component: ["diffusers", class_name]}
    (folder / "model_index.json").write_text(json.dumps(index))
    weights = {"weight": torch.zeros(parameters)}
    save_file(weights, str(folder / component / "diffusion_pytorch_model.safetensors"))
    return folder


def entry(name: str, source: Path, **changes: object) -> ModelSpec:
    spec = load_registry().get(name)
    assert spec is not None
    return spec.model_copy(update={"source": str(source), "adapters": (), **changes})


def start(tmp_path: Path, specs: list[ModelSpec], **limits: int) -> None:
    config = MeshConfig(models_dir=tmp_path, workers=[])
    settings = WorkerSettings(
        worker_id="w0",
        models=[s.name for s in specs],
        checkpoint_dir=tmp_path / "ckpt",
        metrics_port=None,
        **limits,
    )
    load_hosts(config, settings, specs)


@pytest.fixture
def flux(tmp_path: Path) -> ModelSpec:
    return entry("flux-tiny", fake_folder(tmp_path, "transformer", "FluxTransformer2DModel"))


@pytest.mark.parametrize(
    ("component", "class_name"),
    [("transformer", "SD3Transformer2DModel"), ("unet", "UNet2DConditionModel")],
)
def test_a_cold_model_whose_denoiser_takes_no_cache_refuses_the_start(
    tmp_path: Path, flux: ModelSpec, component: str, class_name: str
) -> None:
    cached = entry(
        "sd3-tiny", fake_folder(tmp_path, component, class_name), cache={"kind": "first-block"}
    )
    with pytest.raises(ModelLoadError) as caught:
        start(tmp_path, [flux, cached], max_resident_models=1)
    message = str(caught.value)
    assert message.startswith(
        f"model 'sd3-tiny' field cache: its denoiser {class_name} has no diffusers step cache"
    ), message
    assert "transformer models only" not in message


def test_a_cold_float16_model_on_a_cpu_worker_refuses_the_start(
    tmp_path: Path, flux: ModelSpec
) -> None:
    half = entry(
        "sd3-tiny", fake_folder(tmp_path, "transformer", "SD3Transformer2DModel"), dtype="float16"
    )
    with pytest.raises(ModelLoadError, match=r"^model 'sd3-tiny' field dtype: float16"):
        start(tmp_path, [flux, half], max_resident_models=1)


def test_a_model_past_max_resident_bytes_alone_refuses_the_start(tmp_path: Path) -> None:
    big = entry("flux-tiny", fake_folder(tmp_path, "transformer", "FluxTransformer2DModel", 1000))
    size = 1000 * 4  # float32
    with pytest.raises(StartupError) as caught:
        start(tmp_path, [big], max_resident_bytes=size - 1)
    assert str(caught.value).startswith(
        f"worker 'w0' field max_resident_bytes: {size - 1} is less than the estimated "
        f"{size} weight bytes (float32) of model 'flux-tiny' alone"
    )
