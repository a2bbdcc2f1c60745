"""A warm-up shape may set only the size fields its entry's modality uses: the refusal says
the field does not apply, not that a limit no such entry could use should be set."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.common.registry_entries import AUDIO, IMAGE, accepted, refusal


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
    message = refusal(entry, warmup=[shape])
    assert f"warmup[0].{field}: {entry['modality']} models take no {field}" in message
    assert "limits." not in message, message
    assert f"(an {entry['modality']} shape sets " in message  # image and audio both take "an"


def test_the_fields_of_the_modality_still_pass() -> None:
    audio = accepted(AUDIO, warmup=[{"duration_s": 2.0}])
    image = accepted(IMAGE, warmup=[{"width": 64}])
    assert audio.warmup[0].duration_s == 2.0 and image.warmup[0].width == 64
