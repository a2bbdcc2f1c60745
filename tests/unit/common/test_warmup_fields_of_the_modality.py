"""A warm-up shape may set only the size fields its entry's modality uses: the refusal says
the field does not apply, not that a limit no such entry could use should be set."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.registry import RegistryError, parse_registry

AUDIO: dict[str, Any] = {
    "name": "a",
    "modality": "audio",
    "pipeline": "StableAudioPipeline",
    "source": "x",
    "defaults": {"duration_s": 1.0},
    "limits": {"max_duration_s": 10.0},
}
IMAGE: dict[str, Any] = {
    "name": "i",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 128, "max_height": 128, "size_multiple": 16},
}


@pytest.mark.parametrize(
    ("entry", "shape", "field"),
    [
        (AUDIO, {"width": 64}, "width"),
        (AUDIO, {"num_frames": 5}, "num_frames"),
        (IMAGE, {"num_frames": 5}, "num_frames"),
        (IMAGE, {"duration_s": 2.0}, "duration_s"),
    ],
)
def test_a_field_the_modality_does_not_use_is_refused_as_such(
    entry: dict[str, Any], shape: dict[str, Any], field: str
) -> None:
    with pytest.raises(RegistryError) as caught:
        parse_registry({"models": [{**entry, "warmup": [shape]}]})
    message = str(caught.value)
    assert f"warmup[0].{field}: {entry['modality']} models take no {field}" in message
    assert "limits." not in message, message
    article = "an" if entry["modality"] == "image" or entry["modality"] == "audio" else "a"
    assert f"({article} {entry['modality']} shape sets " in message


def test_the_fields_of_the_modality_still_pass() -> None:
    (audio,) = parse_registry({"models": [{**AUDIO, "warmup": [{"duration_s": 2.0}]}]}).models
    (image,) = parse_registry({"models": [{**IMAGE, "warmup": [{"width": 128}]}]}).models
    assert audio.warmup[0].duration_s == 2.0 and image.warmup[0].width == 128
