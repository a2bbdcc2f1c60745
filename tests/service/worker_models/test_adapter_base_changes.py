"""A LoRA whose load changes the base model fails only its own job and leaves the model as it
was: a Flux Control-style LoRA (its x_embedder reads twice the latent channels, with norm
weights of its own), which diffusers would load by widening the transformer in place, and a
LoRA for a larger model, whose load fails halfway through that widening. Later jobs, with
and without other adapters, give the bytes they gave before. The LoRAs are built here with
peft from the tiny Flux's own transformer config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers import FluxPipeline, FluxTransformer2DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from wm_helpers import job_for, of, run

from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobFinished
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.base_changes import BaseSnapshot
from mediamesh.worker.models.diffusion import DiffusionHost


def _random_lora(
    models_dir: Path, target: Path, changes: dict[str, Any], modules: list[str], norms: bool
) -> Path:
    """A random LoRA on `modules` of a tiny-Flux transformer whose config has `changes`,
    saved in the diffusers format; with `norms`, it carries the attention norm weights too,
    as Flux Control LoRAs do."""
    base = FluxTransformer2DModel.load_config(models_dir / "flux-tiny" / "transformer")
    config = {k: v for k, v in base.items() if not k.startswith("_")}
    torch.manual_seed(11)
    transformer = FluxTransformer2DModel.from_config({**config, **changes})
    transformer.add_adapter(
        LoraConfig(r=4, lora_alpha=4, target_modules=modules, init_lora_weights=False)
    )
    layers = get_peft_model_state_dict(transformer)
    if norms:
        for name, parameter in transformer.named_parameters():
            if name.endswith(("norm_q.weight", "norm_k.weight")):
                layers[name] = parameter.detach() * 1.5
    FluxPipeline.save_lora_weights(target, transformer_lora_layers=layers, safe_serialization=True)
    return target


@pytest.fixture(scope="module")
def loras(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loras")
    inputs = FluxTransformer2DModel.load_config(models_dir / "flux-tiny" / "transformer")[
        "in_channels"
    ]
    return {
        # A control image's latents beside the noise: twice the input channels.
        "control": _random_lora(
            models_dir,
            root / "control",
            {"in_channels": 2 * inputs, "out_channels": inputs},
            ["x_embedder", "to_q"],
            norms=True,
        ),
        # Twice the channels in and out: diffusers widens x_embedder's inputs, then fails on
        # proj_out, whose wider output its bias cannot fill.
        "halfway": _random_lora(
            models_dir,
            root / "halfway",
            {"in_channels": 2 * inputs, "out_channels": 2 * inputs},
            ["x_embedder", "proj_out"],
            norms=False,
        ),
    }


def _host(registry_spec, models_dir: Path, loras: dict[str, Path], tmp_path: Path) -> DiffusionHost:
    flux = registry_spec("flux-tiny")
    spec = ModelSpec.model_validate(
        {
            **flux.model_dump(),
            "adapters": [
                {"name": "style", "source": "{models_dir}/flux-tiny-lora-style"},
                *({"name": name, "source": str(path)} for name, path in loras.items()),
            ],
        }
    )
    host = load_host(
        spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path, max_loaded_adapters=8
    )
    assert isinstance(host, DiffusionHost)
    return host


def _outcomes(host: DiffusionHost, jobs: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Runs the jobs as one batch: job id -> result bytes, or its JobFailed."""
    batch = [
        job_for(
            host.spec, job_id, seed=7, steps=2, adapters=tuple(AdapterScale(a, 1.0) for a in names)
        )
        for job_id, names in jobs.items()
    ]
    events = run(host, batch)
    outcome: dict[str, Any] = {}
    for job_id in jobs:
        finished = of(events, job_id, JobFinished)
        outcome[job_id] = finished[0].data if finished else of(events, job_id, JobFailed)[0]
    return outcome


def _state(host: DiffusionHost) -> dict[str, torch.Tensor]:
    return {
        k: v.clone() for k, v in host.pipeline.transformer.state_dict().items() if "lora_" not in k
    }


def test_a_control_lora_fails_its_job_and_the_model_stays_as_it_was(
    models_dir: Path, registry_spec, loras: dict[str, Path], tmp_path: Path
) -> None:
    host = _host(registry_spec, models_dir, loras, tmp_path)
    before = _outcomes(host, {"plain": (), "styled": ("style",)})
    weights = _state(host)
    x_embedder = host.pipeline.transformer.x_embedder
    for attempt in range(2):
        # In one batch with a job without adapters: only the control job fails.
        outcome = _outcomes(host, {"control": ("control",), "plain": ()})
        failed = outcome["control"]
        assert isinstance(failed, JobFailed), attempt
        assert failed.code == StatusCode.FAILED_PRECONDITION
        assert failed.message == (
            f"adapter 'control' of model 'flux-tiny' (source {loras['control']}) changes the "
            "base model: widens transformer.x_embedder from 16 to 32 input features, sets "
            "transformer.config.in_channels from 16 to 32, overwrites 4 norm weights of "
            "transformer (a Control LoRA); not supported, so it was unloaded and the model "
            "left as it was"
        )
        assert outcome["plain"] == before["plain"]
        after = _outcomes(host, {"styled": ("style",)})
        assert after["styled"] == before["styled"]
    transformer = host.pipeline.transformer
    assert transformer.x_embedder is x_embedder and transformer.config.in_channels == 16
    assert set(_state(host)) == set(weights)
    assert all(torch.equal(_state(host)[k], v) for k, v in weights.items())
    # The style adapter stayed loaded throughout: it was never loaded again.
    assert host.adapters is not None and host.adapters.loads == 1
    assert [name for name, _ in host.adapters.loaded()] == ["style"]
    host.close()


def test_a_control_lora_as_the_first_adapter_leaves_the_others_working(
    models_dir: Path, registry_spec, loras: dict[str, Path], tmp_path: Path
) -> None:
    reference = _host(registry_spec, models_dir, loras, tmp_path)
    expected = _outcomes(reference, {"plain": (), "styled": ("style",)})
    reference.close()
    host = _host(registry_spec, models_dir, loras, tmp_path)
    assert isinstance(_outcomes(host, {"control": ("control",)})["control"], JobFailed)
    assert _outcomes(host, {"styled": ("style",)})["styled"] == expected["styled"]
    assert _outcomes(host, {"plain": ()})["plain"] == expected["plain"]
    host.close()


def test_a_lora_whose_shapes_do_not_fit_fails_naming_them_and_is_undone(
    models_dir: Path, registry_spec, loras: dict[str, Path], tmp_path: Path
) -> None:
    host = _host(registry_spec, models_dir, loras, tmp_path)
    before = _outcomes(host, {"plain": (), "styled": ("style",)})
    failed = _outcomes(host, {"halfway": ("halfway",)})["halfway"]
    assert isinstance(failed, JobFailed)
    assert failed.code == StatusCode.FAILED_PRECONDITION
    assert failed.message == (
        f"adapter 'halfway' of model 'flux-tiny' (source {loras['halfway']}): its weights' "
        "shapes do not fit the model (size mismatch for bias: copying a param with shape "
        "torch.Size([16]) from checkpoint, the shape in current model is torch.Size([32])); "
        "is it a LoRA for another size of this model family?"
    )
    # The widening diffusers did before it failed is undone.
    assert host.pipeline.transformer.x_embedder.in_features == 16
    assert host.pipeline.transformer.config.in_channels == 16
    assert _outcomes(host, {"plain": (), "styled": ("style",)}) == before
    host.close()


def test_an_adapter_folder_without_weights_names_what_was_looked_for(
    models_dir: Path, registry_spec, loras: dict[str, Path], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("no weights here")
    host = _host(registry_spec, models_dir, {"empty": empty}, tmp_path)
    failed = _outcomes(host, {"empty": ("empty",)})["empty"]
    assert isinstance(failed, JobFailed) and failed.code == StatusCode.FAILED_PRECONDITION
    assert failed.message == (
        f"adapter 'empty' of model 'flux-tiny': {empty} holds no LoRA weights: looked for a "
        "*.safetensors file, then a *.bin file (pytorch_lora_weights.safetensors or "
        "pytorch_lora_weights.bin); put the weights there or name the file in the adapter's "
        "weight_name"
    )
    host.close()


def test_a_model_that_cannot_be_put_back_fails_every_later_job_by_name(
    models_dir: Path,
    registry_spec,
    loras: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(BaseSnapshot, "restore", lambda self, pipeline: None)
    host = _host(registry_spec, models_dir, loras, tmp_path)
    assert isinstance(_outcomes(host, {"control": ("control",)})["control"], JobFailed)
    failed = _outcomes(host, {"plain": ()})["plain"]
    assert isinstance(failed, JobFailed) and failed.code == StatusCode.INTERNAL
    assert failed.message.startswith(
        "model 'flux-tiny' was changed by loading adapter 'control' (widens "
        "transformer.x_embedder from 16 to 32 input features"
    )
    assert failed.message.endswith("could not be put back; restart the worker")
    host.close()
