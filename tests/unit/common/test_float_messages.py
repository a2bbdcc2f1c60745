"""Range errors show a request's float as it was sent, without float32 noise."""

from __future__ import annotations

import math
import struct

import pytest

from mediamesh.common.api.requests import request_fields
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.params import resolve
from mediamesh.common.registry import load_registry
from mediamesh.common.shown_numbers import shown
from tests.input_media import image_bytes

REGISTRY = load_registry()


def as_float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def refusal(**fields: object) -> str:
    request = common_pb2.GenerateRequest(prompt="a fox", **fields)  # type: ignore[arg-type]
    model = REGISTRY.get(request.model)
    assert model is not None
    with pytest.raises(InvalidArgument) as caught:
        resolve(model, request_fields(request))
    return caught.value.message


def test_float32_fields_read_as_sent() -> None:
    # The wire's float32 widened: -0.10000000149011612 and 0.05000000074505806 before.
    image = image_bytes()
    assert refusal(model="sdxl-img2img-tiny", image=image, strength=-0.1).startswith(
        "strength: -0.1 is out of range; allowed 0 < strength <= 1"
    )
    assert refusal(model="sdxl-img2img-tiny", image=image, strength=0.1).startswith(
        "strength: 0.1 with 4 steps leaves no denoising step"
    )
    assert refusal(model="stable-audio-tiny", duration_s=0.05) == (
        "duration_s: 0.05 is out of range; allowed 0.1..10.0"
    )
    assert refusal(model="sdxl-tiny", guidance_scale=20.3) == (
        "guidance_scale: 20.3 is out of range; allowed 0.0..20.0"
    )


def test_shown_keeps_exact_values_and_non_float32_ones() -> None:
    assert shown(as_float32(0.1)) == "0.1" and shown(0.1) == "0.1"
    assert shown(as_float32(-0.1)) == "-0.1"
    assert shown(2.0) == "2.0" and shown(0.0) == "0.0" and shown(1.5) == "1.5"
    assert shown(as_float32(1e-8)) == "1e-08"
    assert shown(as_float32(16777217.0)) == "16777216.0"
    # A float64 that no float32 equals is shown in full, so nothing is rounded away.
    assert shown(1 / 3) == repr(1 / 3) and shown(20.000000001) == "20.000000001"
    assert shown(1e300) == "1e+300" and shown(math.nan) == "nan" and shown(math.inf) == "inf"
    assert shown(7) == "7"
