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

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.input_images import decode_image, probe_image

# The mask is probed (its header read, nothing decoded) against the chosen model's
# `limits.max_input_pixels` before the request is admitted, and decoded only after its
# admission: a mask of millions of pixels costs a caller over its rate, or asking of a
# model that takes fewer, no decoding at all. Without a model's limit, 4096 x 4096, above
# every shipped model's.
MAX_MASK_PIXELS = 4096 * 4096
_REPAINT, _KEEP = 255, 0


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
    has_alpha = picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info
    if not has_alpha:
        raise InvalidArgument(
            f"mask: a {picture.mode} image has no alpha channel; the mask marks the area to "
            "edit with fully transparent pixels (alpha 0), so send a PNG with transparency"
        )
    alpha = picture.convert("RGBA").getchannel("A")
    mask = alpha.point(lambda value: _REPAINT if value == 0 else _KEEP)
    out = io.BytesIO()
    mask.save(out, "PNG")
    return out.getvalue()


async def converted_mask(data: bytes, max_pixels: int) -> bytes:
    """`mask_from_alpha` off the event loop: decoding a large PNG takes milliseconds."""
    return await asyncio.to_thread(mask_from_alpha, data, max_pixels)
