"""A request field the chosen model does not use is refused naming it, never dropped."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import RegistryError, load_registry, parse_registry

REGISTRY = load_registry()


def spec(name: str):
    found = REGISTRY.get(name)
    assert found is not None
    return found


def test_flux_refuses_a_negative_prompt_naming_it():
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec("flux-tiny"), RequestFields("flux-tiny", "a fox", negative_prompt="blurry"))
    assert caught.value.message.startswith("negative_prompt: model 'flux-tiny' (FluxPipeline)")


def test_a_field_the_model_uses_still_works():
    params = resolve(spec("wan-tiny"), RequestFields("wan-tiny", "a fox", negative_prompt="blur"))
    assert params.negative_prompt == "blur"
    # An empty negative prompt is no negative prompt: Flux takes it.
    assert resolve(spec("flux-tiny"), RequestFields("flux-tiny", "a fox")).negative_prompt == ""


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        ("flux-tiny", "num_frames", 5),
        ("flux-tiny", "duration_s", 1.0),
        ("stable-audio-tiny", "width", 64),
        ("stable-audio-tiny", "num_frames", 0),
        ("wan-tiny", "duration_s", 2.0),
    ],
)
def test_fields_outside_the_model_are_refused_even_at_zero(model, field, value):
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec(model), RequestFields(model, "x", **{field: value}))
    assert caught.value.message.startswith(f"{field}: model {model!r}")


def test_accepted_fields_come_from_the_family_or_the_entry():
    assert "negative_prompt" not in spec("flux-tiny").accepted_fields
    assert {"negative_prompt", "num_frames"} <= spec("wan-tiny").accepted_fields
    assert "duration_s" in spec("stable-audio-tiny").accepted_fields
    entry = spec("flux-tiny").model_dump(mode="json")
    entry["accepted_fields"] = ["prompt", "steps", "seed"]
    narrowed = parse_registry({"models": [entry]}).models[0]
    assert narrowed.accepted_fields == {"prompt", "steps", "seed"}
    with pytest.raises(InvalidArgument, match=r"^width: "):
        resolve(narrowed, RequestFields("flux-tiny", "x", width=64))


@pytest.mark.parametrize("field", ["negative_prompt", "strength"])
def test_an_entry_cannot_list_a_field_its_pipeline_would_drop(field: str):
    # Flux's call takes a negative prompt only with true CFG, and no strength at all: listed,
    # each would be accepted from requests and change nothing.
    entry = spec("flux-tiny").model_dump(mode="json")
    entry["accepted_fields"] = ["prompt", "steps", "seed", field]
    with pytest.raises(RegistryError, match=f"accepted_fields: {field} would never reach"):
        parse_registry({"models": [entry]})


def test_an_entry_cannot_accept_a_field_of_another_modality():
    entry = spec("flux-tiny").model_dump(mode="json")
    entry["accepted_fields"] = ["prompt", "duration_s"]
    with pytest.raises(RegistryError, match="duration_s cannot apply to image models"):
        parse_registry({"models": [entry]})
