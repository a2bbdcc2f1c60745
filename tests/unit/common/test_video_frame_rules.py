"""Video frame counts: each entry's `frame_multiple` is what its VAE decodes exactly."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, load_registry, parse_registry
from tests.input_media import image_bytes

REGISTRY = load_registry()
COGVIDEOX = ("cogvideox-tiny", "cogvideox-i2v-tiny")


def spec(name: str) -> ModelSpec:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def fields(name: str, frames: int) -> RequestFields:
    # The image-to-video entry needs its first frame.
    image = image_bytes() if "image" in spec(name).inputs else None
    return RequestFields(name, "a fox", num_frames=frames, image=image)


@pytest.mark.parametrize("name", COGVIDEOX)
def test_cogvideox_takes_only_8k_plus_1_frames(name: str) -> None:
    # Its VAE decodes N frames only from an odd latent count, (N - 1) / 4 + 1: asked for 5
    # frames it made 8, 13 made 16 and 29 made 32, so those are refused, not padded.
    assert spec(name).limits.frame_multiple == 8
    for frames in (1, 9, 17, 25, 33):
        assert resolve(spec(name), fields(name, frames)).num_frames == frames
    for frames in (5, 13, 21, 29):
        with pytest.raises(InvalidArgument) as caught:
            resolve(spec(name), fields(name, frames))
        assert caught.value.message == (
            f"num_frames: {frames} is not allowed for {name}; "
            "(num_frames - 1) must be a multiple of 8"
        )


def test_wan_keeps_4k_plus_1() -> None:
    wan = spec("wan-tiny")
    assert wan.limits.frame_multiple == 4
    assert resolve(wan, RequestFields("wan-tiny", "a fox", num_frames=5)).num_frames == 5


def test_every_shipped_video_entry_defaults_to_and_allows_counts_it_makes() -> None:
    for model in REGISTRY.models:
        if model.modality == "video":
            multiple = model.limits.frame_multiple
            assert (model.defaults.num_frames - 1) % multiple == 0, model.name
            assert (model.limits.max_num_frames - 1) % multiple == 0, model.name


@pytest.mark.parametrize(
    ("defaults", "limits", "words"),
    [
        (
            {"num_frames": 5},
            {"max_num_frames": 33},
            "defaults.num_frames=5 is not a count the model makes: (num_frames - 1) must be a "
            "multiple of limits.frame_multiple (8); use 1 or 9",
        ),
        (
            {"num_frames": 9},
            {"max_num_frames": 32},
            "limits.max_num_frames=32 is not a count the model makes: (num_frames - 1) must "
            "be a multiple of limits.frame_multiple (8); use 25 or 33",
        ),
    ],
)
def test_an_entry_whose_own_frame_counts_break_its_rule_is_refused(
    defaults: dict, limits: dict, words: str
) -> None:
    entry = spec("cogvideox-tiny").model_dump(mode="json", exclude={"accepted_fields"})
    entry["defaults"] = {**entry["defaults"], **defaults}
    entry["limits"] = {**entry["limits"], **limits}
    with pytest.raises(RegistryError) as caught:
        parse_registry({"models": [entry]})
    assert "model 'cogvideox-tiny'" in str(caught.value) and words in str(caught.value)
