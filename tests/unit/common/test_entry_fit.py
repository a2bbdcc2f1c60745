"""A registry entry its pipeline cannot serve as written is refused at load, naming the
field: it would otherwise start a mesh that looks ready and fails or misleads every job."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from mediamesh.common.errors import FailedPrecondition
from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import RegistryError, load_registry, parse_registry
from mediamesh.worker.models.made_size import check_made_size

REGISTRY = load_registry()


def entry(name: str, **changes: Any) -> dict[str, Any]:
    found = REGISTRY.get(name)
    assert found is not None
    data = found.model_dump(mode="json")
    # Re-derived for the changed entry, as for one written by hand.
    data.pop("accepted_fields")
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        place = data
        for part in path:
            place = place[part]
        place[last] = value
    return data


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(RegistryError) as caught:
        parse_registry({"models": [data]})
    return str(caught.value)


@pytest.mark.parametrize(
    ("name", "modality", "words"),
    [
        ("flux-tiny", "video", "modality: video, but FluxPipeline's call takes no num_frames"),
        ("flux-tiny", "audio", "FluxPipeline's call takes no audio_end_in_s or audio_length_in_s"),
        ("wan-tiny", "image", "modality: image, but WanPipeline makes video (its call takes"),
        ("stable-audio-tiny", "image", "StableAudioPipeline makes audio"),
    ],
)
def test_a_modality_the_pipeline_does_not_make_is_refused(name: str, modality: str, words: str):
    data = entry(name, modality=modality)
    # Only the modality is wrong: the rest fits whichever it claims.
    data["output"] = {}
    data["limits"].pop("size_multiple", None)
    data["defaults"].update(width=64, height=64, num_frames=9, duration_s=1.0)
    assert words in refusal(data)


def test_a_call_argument_the_pipeline_has_no_parameter_for_is_refused():
    message = refusal(entry("flux-tiny", call_kwargs={"foo": 1, "max_sequence_length": 64}))
    assert "call_kwargs: FluxPipeline's call has no parameter foo" in message
    # One it has passes.
    parse_registry({"models": [entry("flux-tiny", call_kwargs={"max_sequence_length": 64})]})


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("defaults__width", 72, "defaults.width=72 is not a multiple of limits.size_multiple (16)"),
        ("defaults__height", 40, "defaults.height=40 is not a multiple"),
        ("limits__max_width", 500, "limits.max_width=500 is not a multiple"),
        ("limits__max_height", 250, "use 240 or 256"),
    ],
)
def test_sizes_off_the_entrys_own_multiple_are_refused(field: str, value: int, words: str):
    assert words in refusal(entry("flux-tiny", **{field: value}))


def test_a_picture_of_another_size_than_asked_fails_its_job():
    spec = REGISTRY.get("flux-tiny")
    assert spec is not None
    asked = GenerationParams(prompt="x", steps=1, seed=1, width=64, height=48)
    check_made_size(spec, np.zeros((48, 64, 3)), asked)
    with pytest.raises(FailedPrecondition) as caught:
        check_made_size(spec, np.zeros((48, 48, 3)), asked)
    assert caught.value.message.startswith(
        "width: model 'flux-tiny' made 48x48 where 64x48 was asked: FluxPipeline rounds"
    )
    # Frames of a clip are checked the same way; a job without a size is not.
    wan = REGISTRY.get("wan-tiny")
    assert wan is not None
    with pytest.raises(FailedPrecondition):
        check_made_size(wan, np.zeros((9, 32, 48, 3)), asked)
    check_made_size(spec, np.zeros((48, 48, 3)), GenerationParams(prompt="x", steps=1, seed=1))


def test_registry_refusals_name_the_line_without_pydantic_prefixes(tmp_path):
    load = load_registry
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  - name: mine\n"
        "    modality: image\n"
        "    pipeline: FluxPipeline\n"
        "    source: /nowhere\n"
        "    limits: {max_widht: 512}\n"
    )
    with pytest.raises(RegistryError) as caught:
        load(path)
    assert str(caught.value) == (
        f"{path}: line 6: model 'mine' field limits.max_widht: Extra inputs are not permitted"
    )
    path.write_text("models: []\n")
    with pytest.raises(RegistryError) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}: line 1: models: List should have at least 1")
    valid = {**entry("flux-tiny"), "name": "a"}
    path.write_text(yaml.safe_dump({"models": [valid, valid]}))
    with pytest.raises(RegistryError) as caught:
        load(path)
    assert str(caught.value) == f"{path}: line 1: models: model name 'a' appears twice"
    path.write_text("models:\n  - {name: a, modality: image, pipeline: '', source: /x}\n")
    with pytest.raises(RegistryError, match="field pipeline: String should have at least 1"):
        load(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("defaults__steps", True), ("limits__max_steps", "50"), ("batching__max_batch", 4.0)],
)
def test_numbers_are_read_with_their_own_yaml_types(field: str, value: object):
    # Lax, these were read as 1, 50 and 4.
    assert "Input should be a valid integer" in refusal(entry("flux-tiny", **{field: value}))


@pytest.mark.parametrize(
    ("field", "value"), [("defaults__strength", 0.5), ("limits__max_input_pixels", 1024)]
)
def test_input_image_settings_on_a_model_without_inputs_are_refused(field: str, value: object):
    dotted = field.replace("__", ".")
    assert f"{dotted}: FluxPipeline takes no input image" in refusal(
        entry("flux-tiny", **{field: value})
    )
    # On a model that takes an image they apply.
    parse_registry({"models": [entry("flux-img2img-tiny", **{field: value})]})
