"""Real decoders for results in every output format: Pillow, PyAV and soundfile."""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
import soundfile
from PIL import Image


@dataclass(frozen=True)
class DecodedVideo:
    """What PyAV reads back from an encoded clip."""

    codec: str
    frames: np.ndarray
    rate: Fraction | None


def decode_image(data: bytes) -> Image.Image:
    """The image Pillow reads from `data`, fully loaded (so a truncated file fails here)."""
    picture = Image.open(io.BytesIO(data))
    picture.load()
    return picture


def decode_video(data: bytes) -> DecodedVideo:
    """Every frame of the first video stream as HxWx3 uint8, with its codec name."""
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        rate = stream.average_rate
        return DecodedVideo(stream.codec_context.name, np.stack(frames), rate)


def decode_audio(data: bytes) -> tuple[np.ndarray, int, str]:
    """(samples x channels float64, sample rate, libsndfile format name) of `data`."""
    with soundfile.SoundFile(io.BytesIO(data)) as clip:
        return clip.read(), clip.samplerate, f"{clip.format}/{clip.subtype}"
