"""Turns pipeline outputs into the bytes a client receives: PNG, MP4 (or WebP), WAV."""

from __future__ import annotations

import io
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
from PIL import Image

from mediamesh.common.registry import MIME_TYPES

FFMPEG_TIMEOUT_S = 60


class EncodeError(RuntimeError):
    """An output that could not be encoded in any allowed format."""


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """Float [0, 1] (pipeline `np` output) or uint8 pixels to contiguous uint8."""
    if pixels.dtype == np.uint8:
        return np.ascontiguousarray(pixels)
    scaled = np.clip(np.nan_to_num(pixels.astype(np.float32), nan=0.0), 0.0, 1.0) * 255.0
    return np.ascontiguousarray(np.round(scaled).astype(np.uint8))


def encode_png(image: np.ndarray) -> bytes:
    """One HxWx3 image to PNG."""
    buffer = io.BytesIO()
    Image.fromarray(to_uint8(image), mode="RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def encode_webp(frames: np.ndarray, fps: int) -> bytes:
    """FxHxWx3 frames to a lossless animated WebP."""
    images = [Image.fromarray(frame, mode="RGB") for frame in to_uint8(frames)]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="WEBP",
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000 / fps)),
        loop=0,
        lossless=True,
    )
    return buffer.getvalue()


def encode_mp4(frames: np.ndarray, fps: int, ffmpeg_exe: str | None = None) -> bytes:
    """FxHxWx3 frames to H.264 MP4 via the ffmpeg binary that imageio-ffmpeg ships."""
    pixels = to_uint8(frames)
    count, height, width, _ = pixels.shape
    if ffmpeg_exe is None:
        import imageio_ffmpeg

        ffmpeg_exe = imageio_ffmpeg.get_ffmpeg_exe()
    with tempfile.TemporaryDirectory(prefix="mm-enc-") as tmp:
        # A seekable file rather than a pipe: the mp4 muxer rewrites its index at the end
        # (faststart), which plain players need to start before the whole file arrives.
        target = Path(tmp) / "out.mp4"
        command = [
            ffmpeg_exe,
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
            f"{width}x{height}",
            "-r",
            str(fps),
            "-i",
            "-",
            "-an",
            # yuv420p halves chroma resolution, so both dimensions must be even.
            "-vf",
            "pad=ceil(iw/2)*2:ceil(ih/2)*2",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
            "-frames:v",
            str(count),
            str(target),
        ]
        result = subprocess.run(
            command, input=pixels.tobytes(), capture_output=True, timeout=FFMPEG_TIMEOUT_S
        )
        if result.returncode != 0 or not target.is_file():
            message = result.stderr.decode(errors="replace").strip()[-500:]
            raise EncodeError(f"ffmpeg exited with {result.returncode}: {message}")
        return target.read_bytes()


def encode_video(
    frames: np.ndarray, fps: int, fmt: str, fallback: str | None = None
) -> tuple[bytes, str]:
    """Encodes in `fmt`, falling back to `fallback` when ffmpeg fails; returns (bytes, mime)."""
    encoders = {"mp4": lambda: encode_mp4(frames, fps), "webp": lambda: encode_webp(frames, fps)}
    if fmt not in encoders:
        raise EncodeError(f"video format {fmt!r} is not supported")
    try:
        return encoders[fmt](), MIME_TYPES[fmt]
    except (EncodeError, OSError, subprocess.TimeoutExpired) as exc:
        if fallback is None or fallback == fmt or fallback not in encoders:
            raise EncodeError(f"cannot encode {fmt}: {exc}") from exc
        return encoders[fallback](), MIME_TYPES[fallback]


def encode_wav(audio: np.ndarray, sample_rate: int) -> bytes:
    """(channels, samples) float audio in [-1, 1] to 16-bit PCM WAV."""
    if audio.ndim == 1:
        audio = audio[None, :]
    samples = np.clip(np.nan_to_num(audio.astype(np.float32)), -1.0, 1.0)
    pcm = np.round(samples.T * 32767.0).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(audio.shape[0])
        writer.setsampwidth(2)
        writer.setframerate(sample_rate)
        writer.writeframes(pcm.tobytes())
    return buffer.getvalue()
