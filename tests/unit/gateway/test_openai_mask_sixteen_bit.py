"""A 16-bit PNG's transparent colour (tRNS) marks exactly the pixels equal to it in all 16
bits (PNG's rule). Pillow reduces such a PNG to 8 bits: read there, an edit's mask marked
neighbouring greys too, and an RGB one (whose colour Pillow leaves at 16 bits) marked none."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

from mediamesh.gateway.http.openai_mask import mask_from_alpha

REPAINT, KEEP = 255, 0
GRAY, RGB = 0, 2


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def sixteen_bit_png(samples: np.ndarray, colour_type: int, transparent: tuple[int, ...]) -> bytes:
    """A 16-bit PNG of `samples` (height x width, or x 3 for RGB) whose tRNS colour is
    `transparent`; written by hand, as Pillow writes no 16-bit RGB."""
    height, width = samples.shape[:2]
    rows = b"".join(b"\x00" + samples[y].astype(">u2").tobytes() for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    trns = b"".join(struct.pack(">H", value) for value in transparent)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"tRNS", trns)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def repainted(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(mask_from_alpha(data))))


def test_a_16_bit_rgb_transparent_colour_marks_its_pixels() -> None:
    samples = np.full((2, 4, 3), 1000, dtype=np.uint16)
    samples[:, 2:] = 1001
    samples[1, 3] = (1000, 1000, 1256)  # the same high bytes as the colour, not the same colour
    mask = repainted(sixteen_bit_png(samples, RGB, (1000, 1000, 1000)))
    assert mask.tolist() == [[REPAINT, REPAINT, KEEP, KEEP], [REPAINT, REPAINT, KEEP, KEEP]]


def test_a_16_bit_gray_transparent_value_marks_only_that_value() -> None:
    samples = np.full((2, 4), 1000, dtype=np.uint16)
    samples[:, 2:] = 1001  # 4 at 8 bits, as 1000 is
    mask = repainted(sixteen_bit_png(samples, GRAY, (1000,)))
    assert mask.tolist() == [[REPAINT, REPAINT, KEEP, KEEP], [REPAINT, REPAINT, KEEP, KEEP]]


def test_a_16_bit_mask_is_turned_as_its_exif_orientation_says() -> None:
    samples = np.full((2, 4), 7, dtype=np.uint16)
    samples[0, 0] = 1000
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise
    tiff = exif.tobytes().removeprefix(b"Exif\x00\x00")
    plain = sixteen_bit_png(samples, GRAY, (1000,))
    header_end = 8 + 25  # signature, then IHDR: length, type, 13 bytes, CRC
    turned = plain[:header_end] + chunk(b"eXIf", tiff) + plain[header_end:]
    mask = repainted(turned)
    assert mask.shape == (4, 2)
    assert [(y, x) for y, x in zip(*np.nonzero(mask), strict=True)] == [(0, 1)]
