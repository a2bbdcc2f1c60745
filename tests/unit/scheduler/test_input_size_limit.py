"""An input's bytes are held to its pixels: a small image padded with a huge private chunk
(the audit's 40 MiB 512x512 PNG, stored once per job that named it) is INVALID_ARGUMENT naming
the field and the limit, while honest encodings, incompressible ones included, pass."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.input_images import max_encoded_bytes, probe_image
from tests.input_media import image_bytes


def padded_png(size: tuple[int, int], padding: int) -> bytes:
    """A valid PNG of `size` with a private ancillary chunk of `padding` bytes before IEND
    (decoders skip it; its CRC is right)."""
    png = image_bytes(size)
    payload = b"\x00" * padding
    chunk = (
        struct.pack(">I", len(payload))
        + b"prVt"
        + payload
        + struct.pack(">I", zlib.crc32(b"prVt" + payload) & 0xFFFFFFFF)
    )
    return png[:-12] + chunk + png[-12:]  # the last 12 bytes are the IEND chunk


def test_the_limit_is_eight_bytes_a_pixel_a_byte_a_row_and_a_mebibyte() -> None:
    assert max_encoded_bytes(512, 512) == 8 * 512 * 512 + 512 + 2**20 == 3_146_240
    assert max_encoded_bytes(64, 64) == 1_081_408


@pytest.mark.parametrize("field", ["image", "mask_image", "image_id"])
def test_a_padded_image_is_refused_naming_the_field_and_the_limit(field: str) -> None:
    data = padded_png((64, 64), 2 * 2**20)
    Image.open(io.BytesIO(data)).verify()  # a valid PNG all the same
    with pytest.raises(InvalidArgument) as caught:
        probe_image(field, data, max_pixels=262_144)
    assert caught.value.message == (
        f"{field}: {len(data)} bytes for a 64x64 px image; the limit is 1081408 bytes at "
        "that size (8 bytes a pixel, 1 a row and 1 MiB of metadata): drop the padding or "
        "metadata"
    )


def test_the_audit_s_forty_mebibyte_png_is_refused() -> None:
    data = padded_png((512, 512), 40 * 2**20)
    with pytest.raises(InvalidArgument, match=r"^image: 41\d{6} bytes for a 512x512 px image; "):
        probe_image("image", data, max_pixels=262_144)


def noise(size: tuple[int, int], mode: str) -> Image.Image:
    channels = {"RGB": 3, "RGBA": 4}[mode]
    pixels = np.random.default_rng(1).integers(0, 256, (size[1], size[0], channels), np.uint8)
    return Image.fromarray(pixels, mode)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("PNG", {"compress_level": 0}),  # stored, not compressed at all
        ("JPEG", {"quality": 100, "subsampling": 0}),
        ("WEBP", {"lossless": True}),
    ],
)
def test_incompressible_images_pass(kind: str, options: dict) -> None:
    buffer = io.BytesIO()
    noise((512, 512), "RGBA" if kind != "JPEG" else "RGB").save(buffer, kind, **options)
    image = probe_image("image", buffer.getvalue(), max_pixels=262_144)
    assert (image.width, image.height) == (512, 512)


def test_a_tiny_image_with_ordinary_metadata_passes() -> None:
    data = padded_png((1, 1), 500_000)  # an ICC profile or EXIF block is far smaller
    assert probe_image("image", data, max_pixels=262_144).width == 1
