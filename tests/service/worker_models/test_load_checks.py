"""A folder that loads without error but not as the entry's pipeline (a component missing or
of another class, tensors missing, a size multiple finer than the model's) stops the load
with one line naming the entry and its source, instead of serving jobs that all fail."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
from safetensors.torch import load_file, save_file

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.host import load_pipeline
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.tiny_families import _clip_encoder
from mediamesh.worker.models.tiny_image_families import CLIP_HIDDEN, _image_vae
from mediamesh.worker.models.tiny_tokenizers import build_clip_tokenizer


@pytest.fixture(scope="module")
def sd15_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SD1.5-layout folder: one CLIP, a 2-D UNet, no safety checker."""
    tokenizer = build_clip_tokenizer()
    unet = UNet2DConditionModel(
        sample_size=8,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        cross_attention_dim=CLIP_HIDDEN,
        norm_num_groups=16,
    )
    pipeline = StableDiffusionPipeline(
        vae=_image_vae(),
        text_encoder=_clip_encoder(CLIP_HIDDEN, len(tokenizer), tokenizer.eos_token_id),
        tokenizer=tokenizer,
        unet=unet,
        scheduler=EulerDiscreteScheduler(steps_offset=1),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    folder = tmp_path_factory.mktemp("sd15") / "sd15"
    pipeline.save_pretrained(folder, safe_serialization=True)
    return folder


def load_error(spec: ModelSpec, models_dir: Path, tmp_path: Path) -> str:
    with pytest.raises(ModelLoadError) as caught:
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def entry(
    registry_spec: Callable[[str], ModelSpec], source: Path, pipeline: str, base: str = "sdxl-tiny"
) -> ModelSpec:
    spec = registry_spec(base)
    return spec.model_copy(update={"source": str(source), "pipeline": pipeline, "adapters": ()})


def edit_index(folder: Path, **changes: object) -> None:
    """Sets (or, for None, drops) keys of the folder's model_index.json."""
    index_path = folder / "model_index.json"
    index = json.loads(index_path.read_text())
    for key, value in changes.items():
        if value is None:
            index.pop(key, None)
        else:
            index[key] = value
    index_path.write_text(json.dumps(index))


def test_components_the_folder_lacks_are_named(
    registry_spec: Callable[[str], ModelSpec], sd15_folder: Path, tmp_path: Path
) -> None:
    spec = entry(registry_spec, sd15_folder, "StableDiffusionXLPipeline")
    message = load_error(spec, sd15_folder.parent, tmp_path)
    assert message.startswith(
        f"model 'sdxl-tiny' (source {sd15_folder}): cannot be loaded as "
        "StableDiffusionXLPipeline: the folder has no text_encoder_2, tokenizer_2"
    )
    assert "the folder was saved as StableDiffusionPipeline" in message


def test_a_listed_component_whose_folder_is_gone_is_named(
    registry_spec: Callable[[str], ModelSpec], sd15_folder: Path, tmp_path: Path
) -> None:
    # transformers loaded the absent tokenizer folder as an empty tokenizer: the model read
    # ready and every job failed INTERNAL ("int too big to convert").
    partial = tmp_path / "partial-sd15"
    shutil.copytree(sd15_folder, partial)
    shutil.rmtree(partial / "tokenizer")
    spec = entry(registry_spec, partial, "StableDiffusionPipeline")
    message = load_error(spec, tmp_path, tmp_path)
    assert message.startswith(
        f"model 'sdxl-tiny' (source {partial}): cannot be loaded as StableDiffusionPipeline: "
        "its model_index.json lists tokenizer, but the folder has no such subfolder"
    )


def test_a_component_of_another_class_is_named_with_both_classes(
    registry_spec: Callable[[str], ModelSpec], sd15_folder: Path, tmp_path: Path
) -> None:
    spec = entry(registry_spec, sd15_folder, "TextToVideoSDPipeline")
    message = load_error(spec, sd15_folder.parent, tmp_path)
    assert message.startswith(f"model 'sdxl-tiny' (source {sd15_folder}): cannot be loaded as ")
    assert (
        "its unet is a UNet2DConditionModel where TextToVideoSDPipeline expects "
        "UNet3DConditionModel" in message
    )


@pytest.mark.parametrize(
    "pipeline",
    ["StableDiffusionPipeline", "StableDiffusionImg2ImgPipeline", "StableDiffusionInpaintPipeline"],
)
def test_an_sd15_folder_loads_as_its_own_family(
    registry_spec: Callable[[str], ModelSpec], sd15_folder: Path, tmp_path: Path, pipeline: str
) -> None:
    # Older folders do not list image_encoder at all: it defaults to None, so it is not needed.
    older = tmp_path / "older-sd15"
    shutil.copytree(sd15_folder, older)
    edit_index(older, image_encoder=None)
    for folder in (sd15_folder, older):
        spec = entry(registry_spec, folder, pipeline)
        loaded = load_pipeline(spec, models_dir=tmp_path, device="cpu")
        assert type(loaded).__name__ == pipeline


def test_a_component_listed_as_null_is_left_out_on_purpose(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, tmp_path: Path
) -> None:
    # An SDXL refiner's folder lists its first text encoder and tokenizer as null.
    refiner = tmp_path / "refiner"
    shutil.copytree(models_dir / "sdxl-tiny", refiner)
    edit_index(refiner, text_encoder=[None, None], tokenizer=[None, None])
    shutil.rmtree(refiner / "text_encoder")
    spec = entry(registry_spec, refiner, "StableDiffusionXLImg2ImgPipeline")
    loaded = load_pipeline(spec, models_dir=models_dir, device="cpu")
    assert loaded.text_encoder is None and loaded.text_encoder_2 is not None


def test_tensors_the_checkpoint_lacks_are_counted_before_placement(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "my-flux"
    shutil.copytree(models_dir / "flux-tiny", folder)
    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    tensors = load_file(weights)
    for name in ("context_embedder.weight", "context_embedder.bias"):
        del tensors[name]
    save_file(tensors, weights, metadata={"format": "pt"})
    spec = entry(registry_spec, folder, "FluxPipeline", base="flux-tiny")
    message = load_error(spec, models_dir, tmp_path)
    assert message.startswith(
        f"model 'flux-tiny' (source {folder}): cannot be loaded as FluxPipeline: its "
        "transformer is missing 2 tensors from its weight files (context_embedder."
    )
    assert "copy or pull the model again" in message


def test_a_size_multiple_finer_than_the_models_is_refused(
    registry_spec: Callable[[str], ModelSpec], models_dir: Path, tmp_path: Path
) -> None:
    pixart = registry_spec("pixart-tiny")
    limits = pixart.limits.model_copy(update={"size_multiple": 8})
    spec = pixart.model_copy(update={"limits": limits, "adapters": ()})
    message = load_error(spec, models_dir, tmp_path)
    # pixart-tiny: a VAE scale factor of 8 and 2x2 patches.
    assert message.startswith(
        "model 'pixart-tiny' field limits.size_multiple: 8 is not a multiple of 16, which "
        "PixArtSigmaPipeline needs (VAE scale factor 8 x patch size 2)"
    )
