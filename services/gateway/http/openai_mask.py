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
from mediamesh.common.input_images import decode_image

# Decoding happens here, before admission holds the mask to its model's input limit, so it
# is bounded on its own (by the size the header declares, before any pixel is decoded):
# 4096 x 4096 is above every shipped model's limit; admission refuses what its model cannot
# take.
MAX_MASK_PIXELS = 4096 * 4096
_REPAINT, _KEEP = 255, 0


def mask_from_alpha(data: bytes) -> bytes:
    """A PNG in which the fully transparent pixels of `data` are white and the rest black;
    InvalidArgument naming `mask` when it is no image or has no alpha channel."""
    picture = decode_image("mask", data, MAX_MASK_PIXELS)
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


async def converted_mask(data: bytes) -> bytes:
    """`mask_from_alpha` off the event loop: decoding a large PNG takes milliseconds."""
    return await asyncio.to_thread(mask_from_alpha, data)
