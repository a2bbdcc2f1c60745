"""An image-input model that takes width and height makes its result at the input image's
size when the caller sets neither, held to the model's limits like a model that takes no
size; a caller's width and height still have the pipeline resize the input."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, find_model, resolve
from mediamesh.common.registry import load_registry
from tests.input_media import image_bytes, mask_bytes

REGISTRY = load_registry()
# Each takes width and height; the entries' default size is 64x64.
SIZED = ("flux-img2img-tiny", "sdxl-inpaint-tiny", "cogvideox-i2v-tiny")


def _fields(model: str, size: tuple[int, int], **more: object) -> RequestFields:
    mask = mask_bytes(size) if model == "sdxl-inpaint-tiny" else None
    return RequestFields(
        model=model, prompt="a fox", image=image_bytes(size), mask_image=mask, **more
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("model", SIZED)
def test_without_width_and_height_the_job_takes_the_input_size(model: str) -> None:
    spec = find_model(REGISTRY, model)
    assert "width" in spec.accepted_fields and (spec.defaults.width, spec.defaults.height) == (
        64,
        64,
    )
    params = resolve(spec, _fields(model, (128, 96)))
    assert (params.width, params.height) == (128, 96)


@pytest.mark.parametrize("model", SIZED)
def test_a_callers_width_and_height_still_resize_the_input(model: str) -> None:
    spec = find_model(REGISTRY, model)
    params = resolve(spec, _fields(model, (128, 96), width=64, height=48))
    assert (params.width, params.height) == (64, 48)
    # One of the two is enough to ask for a size; the other takes the entry's default.
    params = resolve(spec, _fields(model, (128, 96), width=32))
    assert (params.width, params.height) == (32, 64)


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (
            (100, 60),
            "image: 100x60 px; without width and height flux-img2img-tiny makes its result at "
            "the input's size, which must be a multiple of 16 px up to 512x512 px; set width "
            "and height to have the input resized",
        ),
        ((496, 528), "image: 496x528 px; without width and height"),
    ],
)
def test_an_input_size_the_model_cannot_make_is_refused_naming_the_image(
    size: tuple[int, int], words: str
) -> None:
    spec = find_model(REGISTRY, "flux-img2img-tiny")
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec, _fields(spec.name, size))
    assert caught.value.message.startswith(words)
    # The caller's own size makes it acceptable: the pipeline resizes the input.
    params = resolve(spec, _fields(spec.name, size, width=64, height=64))
    assert (params.width, params.height) == (64, 64)


def test_an_input_at_the_limits_is_taken_as_it_is() -> None:
    spec = find_model(REGISTRY, "flux-img2img-tiny")
    params = resolve(spec, _fields(spec.name, (512, 16)))
    assert (params.width, params.height) == (512, 16)


def test_a_model_without_width_keeps_its_message() -> None:
    spec = find_model(REGISTRY, "sdxl-img2img-tiny")
    assert "width" not in spec.accepted_fields
    assert resolve(spec, _fields(spec.name, (96, 32))).width == 96
    with pytest.raises(InvalidArgument, match="makes its result at the input's size, which"):
        resolve(spec, _fields(spec.name, (100, 60)))
