"""A model folder the worker cannot load stops it with one line naming the entry, its source,
the loader's reason and what to do, never a bare traceback from diffusers or json."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.residency import estimate_weight_bytes


def load_error(spec: ModelSpec, models_dir: Path, tmp_path: Path) -> str:
    with pytest.raises(ModelLoadError) as caught:
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def own_flux(models_dir: Path, tmp_path: Path) -> Path:
    """A copy of flux-tiny's folder, to damage."""
    folder = tmp_path / "my-flux"
    shutil.copytree(models_dir / "flux-tiny", folder)
    return folder


def flux_from(
    registry_spec: Callable[[str], ModelSpec], source: Path, **changes: object
) -> ModelSpec:
    flux = registry_spec("flux-tiny")
    return flux.model_copy(update={"source": str(source), "adapters": (), **changes})


def cut_transformer_weights(folder: Path, keep: Callable[[int], int]) -> None:
    weights = next((folder / "transformer").glob("*.safetensors"))
    data = weights.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    weights.write_bytes(data[: keep(header_length)])


def test_a_folder_of_another_pipeline_class_is_named_with_the_class_it_was_saved_as(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, own_flux: Path, tmp_path: Path
) -> None:
    spec = flux_from(registry_spec, own_flux, pipeline="WanPipeline")
    message = load_error(spec, models_dir, tmp_path)
    assert message.startswith(
        f"model 'flux-tiny' (source {own_flux}): cannot be loaded as WanPipeline: AttributeError: "
    )
    assert "the folder was saved as FluxPipeline" in message


def test_weights_cut_inside_their_header_are_named_before_the_load(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, own_flux: Path, tmp_path: Path
) -> None:
    cut_transformer_weights(own_flux, lambda header: 8 + header // 2)
    message = load_error(flux_from(registry_spec, own_flux), models_dir, tmp_path)
    assert message.startswith(f"model 'flux-tiny' (source {own_flux}): cannot read the weight")
    assert "JSONDecodeError: " in message and "copy or pull the model again" in message


def test_weights_cut_after_their_header_are_named_by_the_load(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, own_flux: Path, tmp_path: Path
) -> None:
    cut_transformer_weights(own_flux, lambda header: 8 + header + 64)
    message = load_error(flux_from(registry_spec, own_flux), models_dir, tmp_path)
    assert message.startswith(
        f"model 'flux-tiny' (source {own_flux}): cannot be loaded as FluxPipeline: "
    )
    assert "diffusion_pytorch_model.safetensors" in message
    assert "its files are complete" in message


def test_own_preview_factors_must_have_a_row_per_latent_channel(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, tmp_path: Path
) -> None:
    flux = registry_spec("flux-tiny")
    preview = flux.preview.model_copy(update={"rgb_factors": ((1.0, 0.0, 0.0),) * 2})
    spec = flux.model_copy(update={"preview": preview, "adapters": ()})
    message = load_error(spec, models_dir, tmp_path)
    # flux-tiny's autoencoder has 4 latent channels.
    assert message.startswith("model 'flux-tiny' field preview.rgb_factors: 2 rows")
    assert "latents have 4 channels" in message


def test_a_missing_preview_autoencoder_names_the_entry_and_the_field(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, tmp_path: Path
) -> None:
    flux = registry_spec("flux-tiny")
    preview = flux.preview.model_copy(update={"vae": "{models_dir}/taef1-not-there"})
    spec = flux.model_copy(update={"preview": preview, "adapters": ()})
    message = load_error(spec, models_dir, tmp_path)
    assert message.startswith(
        f"model 'flux-tiny' field preview.vae: {models_dir / 'taef1-not-there'} does not exist"
    )


def test_a_cold_model_with_cut_weights_is_named_by_its_size_estimate(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, own_flux: Path
) -> None:
    # A model hosted cold counts its weights against the resident limit before loading.
    cut_transformer_weights(own_flux, lambda header: 8 + header // 2)
    with pytest.raises(ModelLoadError) as caught:
        estimate_weight_bytes(flux_from(registry_spec, own_flux), models_dir)
    message = str(caught.value)
    assert message.startswith(f"model 'flux-tiny' (source {own_flux}): cannot read the weight")
    assert "\n" not in message


def test_a_single_file_source_is_named_as_a_file_not_as_missing(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, own_flux: Path, tmp_path: Path
) -> None:
    # It read "... does not exist" for a file the user could see.
    weights = next((own_flux / "transformer").glob("*.safetensors"))
    message = load_error(flux_from(registry_spec, weights), models_dir, tmp_path)
    assert message.startswith(
        f"model 'flux-tiny' field source: {weights} is a file, not a diffusers folder"
    )
    assert "from_single_file" in message
