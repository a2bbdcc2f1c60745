"""Input images for tests: good ones in each format, and every kind of bad one."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def image_bytes(
    size: tuple[int, int] = (64, 64),
    color: float | tuple[float, ...] | str = (200, 40, 40),
    kind: str = "PNG",
    mode: str = "RGB",
) -> bytes:
    """An encoded image of one colour."""
    buffer = io.BytesIO()
    Image.new(mode, size, color).save(buffer, kind)
    return buffer.getvalue()


def mask_bytes(size: tuple[int, int] = (64, 64)) -> bytes:
    """A white (repaint everything) single-channel PNG mask."""
    return image_bytes(size, 255, mode="L")


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
    )


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A few hundred bytes whose header declares a `width` x `height` RGB canvas: decoding it
    would need width * height * 3 bytes."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    # One zero-filled row, compressed: a real bomb's data would be all such rows.
    data = zlib.compress(b"\x00" * (1 + 3 * min(width, 1024)), 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", data)
        + _chunk(b"IEND", b"")
    )


def truncated_png() -> bytes:
    """A PNG with a valid header whose data stops half way."""
    data = image_bytes((64, 64), (10, 200, 30))
    return data[: len(data) // 2]
