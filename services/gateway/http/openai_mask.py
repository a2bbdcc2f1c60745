"""OpenAI's edit mask, read as OpenAI defines it.

OpenAI's `/v1/images/edits` marks the area to edit with the mask's fully transparent pixels
(alpha 0) and ignores its colours; the mesh's inpainting pipelines read a greyscale mask in
which white is repainted. Passing the client's mask through would repaint by colour and throw
the alpha away: a wrong area edited with no error. So this route turns the alpha into the
mesh's mask, and refuses a mask that has no alpha, which OpenAI would refuse too.
"""

from __future__ import annotations

import asyncio
import io

import numpy as np
from PIL import Image

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.input_images import decode_image, header_orientation, probe_image, upright

# The mask is probed (its header read, nothing decoded) against the chosen model's
# `limits.max_input_pixels` before the request is admitted, and decoded only after its
# admission: a mask of millions of pixels costs a caller over its rate, or asking of a
# model that takes fewer, no decoding at all. Without a model's limit, 4096 x 4096, above
# every shipped model's.
MAX_MASK_PIXELS = 4096 * 4096
_REPAINT, _KEEP = 255, 0
# Where a PNG's IHDR keeps its bit depth and colour type: after the 8-byte signature, the
# chunk's length and type (8 bytes), then its width and height (8 bytes).
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_BIT_DEPTH_AT, _COLOUR_TYPE_AT = 24, 25
_GRAY, _RGB = 0, 2
# Pillow's raw mode for a 16-bit RGB PNG, which keeps each sample's high byte; read as
# little-endian instead, the same bytes give each sample's low byte.
_HIGH_BYTES, _LOW_BYTES = "RGB;16B", "RGB;16L"


async def probe_mask(data: bytes, max_pixels: int) -> None:
    """InvalidArgument naming `mask` and the limit when `data` is no PNG, JPEG or WebP, or
    declares more than `max_pixels` pixels; from its header, its pixels left undecoded (off
    the event loop: the rest of the file is still read for its checksums)."""
    await asyncio.to_thread(probe_image, "mask", data, max_pixels)


def mask_from_alpha(data: bytes, max_pixels: int = MAX_MASK_PIXELS) -> bytes:
    """A PNG in which the fully transparent pixels of `data` are white and the rest black;
    InvalidArgument naming `mask` when it is no image, has more than `max_pixels` pixels
    (its model's limit) or has no alpha channel."""
    picture = decode_image("mask", data, max_pixels)
    alpha = _sixteen_bit_colour_alpha(data)
    if alpha is None:
        has_alpha = picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info
        if not has_alpha:
            raise InvalidArgument(
                f"mask: a {picture.mode} image has no alpha channel; the mask marks the area "
                "to edit with fully transparent pixels (alpha 0), so send a PNG with "
                "transparency"
            )
        alpha = picture.convert("RGBA").getchannel("A")
    mask = alpha.point(lambda value: _REPAINT if value == 0 else _KEEP)
    out = io.BytesIO()
    mask.save(out, "PNG")
    return out.getvalue()


async def converted_mask(data: bytes, max_pixels: int) -> bytes:
    """`mask_from_alpha` off the event loop: decoding a large PNG takes milliseconds."""
    return await asyncio.to_thread(mask_from_alpha, data, max_pixels)


def _sixteen_bit_colour_alpha(data: bytes) -> Image.Image | None:
    """The alpha of a 16-bit grey or RGB PNG with a transparent colour (tRNS), upright as
    `decode_image` shows it: 0 where a pixel equals that colour in all 16 bits (PNG's rule),
    255 elsewhere. None for any other image, whose alpha Pillow reads as it is.

    Pillow reduces these PNGs to 8 bits a sample: compared there, 1001 would match a
    transparent 1000 (both are 4 at 8 bits), and an RGB colour, which Pillow leaves at 16
    bits, would match no pixel at all. Call after `decode_image` has checked `data`."""
    if not data.startswith(_PNG_SIGNATURE) or data[_BIT_DEPTH_AT] != 16:
        return None
    colour_type = data[_COLOUR_TYPE_AT]
    if colour_type not in (_GRAY, _RGB):
        return None
    with Image.open(io.BytesIO(data)) as opened:
        colour = opened.info.get("transparency")
        if colour is None:
            return None
        orientation = header_orientation(opened)
        if colour_type == _GRAY:
            # Pillow keeps a 16-bit grey PNG at full depth (mode I;16).
            samples = np.asarray(opened, dtype=np.uint16)
            transparent = samples == colour
        else:
            transparent = np.all(_rgb_samples(opened, data) == np.array(colour), axis=-1)
    alpha = np.where(transparent, 0, 255).astype(np.uint8)
    return upright(Image.fromarray(alpha, "L"), orientation)


def _rgb_samples(opened: Image.Image, data: bytes) -> np.ndarray:
    """A 16-bit RGB PNG's samples at full depth (height x width x 3): Pillow keeps only
    their high bytes, so the low bytes are decoded too, from the same file read as
    little-endian samples."""
    with Image.open(io.BytesIO(data)) as low:
        if any(tile.args != _HIGH_BYTES for tile in low.tile):
            # Pillow decodes these PNGs some other way than the one this reading relies on.
            raise InvalidArgument(
                "mask: a 16-bit RGB PNG with a transparent colour cannot be read here; send "
                "an 8-bit PNG, or one with an alpha channel"
            )
        low.tile = [tile._replace(args=_LOW_BYTES) for tile in low.tile]
        low_bytes = np.asarray(low, dtype=np.uint16)
    high_bytes = np.asarray(opened, dtype=np.uint16)
    return (high_bytes << 8) | low_bytes
