"""output_format, output_quality and fps: checked against the model's modality and registry."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, load_registry, parse_registry

REGISTRY = load_registry()


def spec(name: str) -> ModelSpec:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def _entry(**output: object) -> dict[str, object]:
    return {
        "name": "narrow",
        "modality": "image",
        "pipeline": "Echo",
        "source": "builtin",
        "defaults": {"width": 16, "height": 16},
        "limits": {"max_width": 64, "max_height": 64},
        "output": output,
    }


def _refusal(model: ModelSpec, **fields: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        resolve(model, RequestFields(model.name, "a fox", **fields))  # type: ignore[arg-type]
    return caught.value.message


def test_modality_defaults_fill_an_unset_format() -> None:
    image = resolve(spec("flux-tiny"), RequestFields("flux-tiny", "a fox"))
    assert (image.output_format, image.output_quality, image.fps) == ("png", 0, 0)
    video = resolve(spec("wan-tiny"), RequestFields("wan-tiny", "a fox"))
    assert (video.output_format, video.fps) == ("mp4", 8)
    audio = resolve(spec("stable-audio-tiny"), RequestFields("stable-audio-tiny", "a fox"))
    assert audio.output_format == "wav"


def test_a_chosen_format_and_its_settings_are_kept() -> None:
    image = resolve(
        spec("flux-tiny"),
        RequestFields("flux-tiny", "a fox", output_format="webp", output_quality=40),
    )
    assert (image.output_format, image.output_quality) == ("webp", 40)
    # A lossy format without a quality gets the model's.
    assert (
        resolve(
            spec("flux-tiny"), RequestFields("flux-tiny", "a fox", output_format="jpeg")
        ).output_quality
        == spec("flux-tiny").output.quality
    )
    video = resolve(
        spec("wan-tiny"), RequestFields("wan-tiny", "a fox", output_format="gif", fps=12)
    )
    assert (video.output_format, video.fps) == ("gif", 12)


def test_a_video_format_on_an_image_model_names_output_format_and_the_allowed() -> None:
    message = _refusal(spec("flux-tiny"), output_format="mp4")
    assert message.startswith("output_format: 'mp4' is not available for flux-tiny (image)")
    assert "allowed: png, jpeg, webp" in message


def test_an_unknown_format_is_refused() -> None:
    assert _refusal(spec("stable-audio-tiny"), output_format="pcm").startswith("output_format:")


def test_settings_of_another_format_are_refused_naming_them() -> None:
    assert _refusal(spec("flux-tiny"), output_quality=50).startswith("output_quality:")
    assert _refusal(spec("flux-tiny"), output_format="jpeg", output_quality=0).startswith(
        "output_quality: 0 is out of range"
    )
    assert _refusal(spec("flux-tiny"), fps=8).startswith("fps: flux-tiny makes image")
    assert _refusal(spec("stable-audio-tiny"), fps=8).startswith("fps:")
    assert _refusal(spec("wan-tiny"), fps=0).startswith("fps: 0 is out of range")
    assert _refusal(spec("wan-tiny"), fps=61).startswith("fps: 61 is out of range")


def test_a_registry_entry_narrows_the_list_and_sets_the_default() -> None:
    model = parse_registry({"models": [_entry(format="webp", formats=["webp", "png"])]}).models[0]
    assert model.output_formats == ("webp", "png")
    assert resolve(model, RequestFields("narrow", "a fox")).output_format == "webp"
    message = _refusal(model, output_format="jpeg")
    assert message.startswith("output_format: 'jpeg' is not available for narrow")
    assert message.endswith("allowed: webp, png")


def test_the_default_is_the_first_of_a_narrowed_list() -> None:
    model = parse_registry({"models": [_entry(formats=["jpeg"])]}).models[0]
    assert (model.default_output_format, model.output_formats) == ("jpeg", ("jpeg",))


def test_registry_entries_cannot_name_formats_of_another_modality() -> None:
    with pytest.raises(RegistryError, match=r"output\.formats: mp4 cannot encode image"):
        parse_registry({"models": [_entry(formats=["png", "mp4"])]})
    with pytest.raises(RegistryError, match=r"output\.format: png is not one of output\.formats"):
        parse_registry({"models": [_entry(format="png", formats=["webp"])]})


def test_a_gif_past_50_fps_is_refused_naming_why() -> None:
    """A GIF delay is whole hundredths; browsers show one hundredth as ten, so a 60 fps GIF
    played at about a third of its speed. Other video formats keep 60."""
    message = _refusal(spec("wan-tiny"), output_format="gif", fps=60)
    assert message.startswith("fps: 60 is out of range; allowed 1..50 for gif"), message
    video = resolve(spec("wan-tiny"), RequestFields("wan-tiny", "a fox", fps=60))
    assert (video.output_format, video.fps) == ("mp4", 60)
    with pytest.raises(RegistryError) as refused:
        parse_registry(
            {"models": [{**_entry(format="gif", fps=60), "modality": "video", "pipeline": "Echo"}]}
        )
    assert "output.fps: 60 is past 50" in str(refused.value)


def test_a_format_in_capitals_is_refused_with_the_formats_allowed() -> None:
    message = _refusal(spec("flux-tiny"), output_format="PNG")
    assert message == (
        "output_format: 'PNG' is not available for flux-tiny (image); allowed: png, jpeg, webp"
    )
