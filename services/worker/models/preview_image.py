"""Small preview pictures from plain arrays: sized to at most 256 px a side, encoded by Pillow.

Torch-free, so the Echo model and the latent decoders (`previews`) share it. Runs on the
device thread inside the step callback, never on an event loop.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from mediamesh.common.preview_spec import MAX_PREVIEW_SIDE
from mediamesh.common.work import Preview

# Lossy and fast: a preview is looked at once and replaced by the next one.
_WEBP_QUALITY = 70
# Audio previews are a strip: channels (or frequencies) up, time across.
AUDIO_PREVIEW_SIZE = (MAX_PREVIEW_SIDE, 64)


def preview_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) of a preview of a `width` x `height` result: the same shape, its
    longest side at most MAX_PREVIEW_SIDE (a result with no size gets a square)."""
    if width <= 0 or height <= 0:
        return MAX_PREVIEW_SIDE, MAX_PREVIEW_SIDE
    scale = min(1.0, MAX_PREVIEW_SIDE / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def encode_rgb(pixels: np.ndarray, size: tuple[int, int]) -> Preview:
    """A WebP preview of `pixels` (height x width x 3, uint8) stretched to `size`."""
    image = Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8), "RGB")
    if image.size != size:
        image = image.resize(size, Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    # method 0: the fastest encoder setting; the step loop waits for it.
    image.save(buffer, format="WEBP", quality=_WEBP_QUALITY, method=0)
    return Preview(buffer.getvalue(), "image/webp")


def encode_heatmap(values: np.ndarray, size: tuple[int, int] = AUDIO_PREVIEW_SIZE) -> Preview:
    """A PNG heat map of a 2-D array (rows up the picture, columns across), its range
    stretched to dark blue .. yellow: how an audio clip's latents look, like a spectrogram."""
    grid = np.asarray(values, dtype=np.float32)
    low, high = np.percentile(grid, [1, 99]) if grid.size else (0.0, 1.0)
    level = np.clip((grid - low) / max(float(high - low), 1e-6), 0.0, 1.0)[::-1]
    rgb = np.stack([level, np.sqrt(level), 0.5 * (1.0 - level)], axis=-1)
    image = Image.fromarray((rgb * 255).astype(np.uint8), "RGB")
    image = image.resize(size, Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return Preview(buffer.getvalue(), "image/png")
