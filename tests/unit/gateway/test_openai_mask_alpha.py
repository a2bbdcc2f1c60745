"""OpenAI's edit mask marks the area to edit by transparency; the inpainting pipelines read
white as repaint. The route converts one into the other, so the area OpenAI's client meant is
the one repainted, and a mask without alpha is refused rather than read by its colours."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.http.openai_mask import mask_from_alpha


def png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, "PNG")
    return out.getvalue()


def test_transparent_pixels_become_the_white_area_to_repaint() -> None:
    # White and opaque almost everywhere (a colour reading would repaint it all), with a
    # fully transparent hole and a half-transparent pixel, which OpenAI keeps.
    mask = Image.new("RGBA", (8, 4), (255, 255, 255, 255))
    for x in range(2, 4):
        mask.putpixel((x, 1), (255, 255, 255, 0))
    mask.putpixel((6, 3), (0, 0, 0, 128))
    converted = Image.open(io.BytesIO(mask_from_alpha(png(mask))))
    assert converted.mode == "L" and converted.size == (8, 4)
    white = {(x, y) for x in range(8) for y in range(4) if converted.getpixel((x, y)) == 255}
    assert white == {(2, 1), (3, 1)}
    assert set(converted.getdata()) == {0, 255}


def test_palette_transparency_counts_as_alpha() -> None:
    palette = Image.new("P", (4, 4), 1)
    palette.putpixel((0, 0), 0)
    palette.info["transparency"] = 0
    converted = Image.open(io.BytesIO(mask_from_alpha(png(palette))))
    assert converted.getpixel((0, 0)) == 255 and converted.getpixel((1, 1)) == 0


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_mask_without_alpha_is_refused_naming_mask(mode: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        mask_from_alpha(png(Image.new(mode, (4, 4))))
    assert refused.value.message.startswith(f"mask: a {mode} image has no alpha channel")


def test_bytes_that_are_no_image_are_refused_naming_mask() -> None:
    with pytest.raises(InvalidArgument, match=r"^mask: cannot be decoded"):
        mask_from_alpha(b"not a picture")
