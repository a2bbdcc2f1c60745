"""An input is read as its viewer shows it: a 16-bit grayscale PNG keeps its tones (Pillow's
plain conversion clipped every value above 255 to white, so a mask repainted nearly the
whole picture), and an EXIF orientation turns the picture upright, at the size the request
is checked against (a phone's portrait photo was processed sideways, and a mask drawn on it
upright was refused as the wrong size)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mediamesh.common.input_images import decode_image, probe_image

LIMIT = 10**6


def encoded(image: Image.Image, kind: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def test_a_16_bit_gray_png_keeps_its_tones() -> None:
    ramp = np.tile(np.arange(64, dtype=np.uint16) * 1000, (8, 1))
    wide = Image.fromarray(ramp)
    assert wide.mode == "I;16"
    decoded = decode_image("image", encoded(wide, "PNG"), LIMIT)
    assert decoded.mode == "L"
    assert [decoded.getpixel((x, 0)) for x in (0, 16, 63)] == [0, 62, 245]
    # The 8-bit picture of the same tones decodes to the same pixels.
    narrow = Image.fromarray(((ramp.astype(np.uint32) + 128) // 257).astype(np.uint8))
    assert decoded.tobytes() == decode_image("image", encoded(narrow, "PNG"), LIMIT).tobytes()


def test_a_16_bit_gray_pngs_transparent_value_stays_transparent() -> None:
    ramp = np.full((8, 8), 40_000, dtype=np.uint16)
    ramp[0, 0] = 0
    decoded = decode_image("mask", encoded(Image.fromarray(ramp), "PNG", transparency=0), LIMIT)
    with_alpha = decoded.convert("RGBA")
    assert with_alpha.getpixel((0, 0))[3] == 0 and with_alpha.getpixel((1, 0))[3] == 255


@pytest.mark.parametrize("kind", ["JPEG", "WEBP", "PNG"])
@pytest.mark.parametrize(("orientation", "shown"), [(1, (96, 64)), (3, (96, 64)), (6, (64, 96))])
def test_an_exif_orientation_is_applied_and_sets_the_size(
    kind: str, orientation: int, shown: tuple[int, int]
) -> None:
    stored = Image.new("RGB", (96, 64), (0, 0, 0))
    stored.paste((255, 255, 255), (0, 0, 8, 8))  # a white corner, stored at the top left
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encoded(stored, kind, exif=exif.tobytes(), quality=95)
    probed = probe_image("image", data, LIMIT)
    assert (probed.width, probed.height) == shown
    decoded = decode_image("image", data, LIMIT)
    assert decoded.size == shown
    corner = {1: (0, 0), 3: (95, 63), 6: (63, 0)}[orientation]
    pixel = decoded.getpixel(corner)
    assert isinstance(pixel, tuple) and min(pixel) > 200, (corner, pixel)


def test_a_broken_exif_block_leaves_the_picture_as_stored() -> None:
    data = encoded(Image.new("RGB", (96, 64)), "JPEG", exif=b"Exif\x00\x00garbage")
    assert (probe_image("image", data, LIMIT).width, decode_image("image", data, LIMIT).size) == (
        96,
        (96, 64),
    )
