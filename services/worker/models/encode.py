"""Turns pipeline outputs into the bytes a client receives, in the format the job asked for.

Images go through Pillow, video through PyAV (the FFmpeg libraries its wheel bundles) and
audio through soundfile (libsndfile). Every function here is CPU-bound and blocking: the
worker calls it from its device thread, never on the event loop.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import av
import numpy as np
import soundfile
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.output_formats import FORMATS_BY_MODALITY, MIME_TYPES
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.ogg_pages import with_fixed_serial

# Codec and container of each video format. yuv420p is what every player decodes.
_VIDEO_CODECS: dict[str, tuple[str, str, str]] = {
    "mp4": ("mp4", "libx264", "yuv420p"),
    "webm": ("webm", "libvpx-vp9", "yuv420p"),
    "gif": ("gif", "gif", "pal8"),
}
# Constant-quality settings: results are short clips, so quality matters more than size.
# x264's macroblock tree is off: with it, identical frames encoded in one worker process
# came out as up to five different bitstreams (decoding up to 29 levels apart), so a seed
# and a resumed job were not reproducible; without it they were one in every run.
_VIDEO_OPTIONS: dict[str, dict[str, str]] = {
    "mp4": {
        "crf": "20",
        "preset": "veryfast",
        "movflags": "+faststart",
        "x264-params": "mbtree=0",
    },
    "webm": {"crf": "32", "b": "0", "deadline": "realtime", "cpu-used": "8"},
    "gif": {},
}
# libsndfile format and subtype of each audio format. FLAC keeps 24 bits; WAV stays 16-bit
# PCM, which every player reads; Vorbis takes any sample rate (Opus only a few).
_AUDIO_SUBTYPES: dict[str, tuple[str, str]] = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_24"),
    "ogg": ("OGG", "VORBIS"),
}


# Container, codec and sample format of each compressed audio format, encoded by FFmpeg
# through PyAV: LAME for MP3, libopus in Ogg (RFC 7845), FFmpeg's AAC in ADTS frames (the
# `audio/aac` files OpenAI's speech API returns). Each codec takes only some sample rates.
_COMPRESSED_AUDIO: dict[str, tuple[str, str, str]] = {
    "mp3": ("mp3", "libmp3lame", "fltp"),
    "opus": ("ogg", "libopus", "flt"),
    "aac": ("adts", "aac", "fltp"),
}
# Bit-exact muxing: the Ogg muxer otherwise draws a random stream serial number, the
# Matroska (WebM) muxer random segment and track UIDs, and the MP3 and MP4 muxers write the
# library's version, so one seed would not give one file.
_BITEXACT = {"fflags": "+bitexact"}


class EncodeError(RuntimeError):
    """An output that could not be encoded in the requested format."""


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """Float [0, 1] (pipeline `np` output) or uint8 pixels to contiguous uint8."""
    if pixels.dtype == np.uint8:
        return np.ascontiguousarray(pixels)
    scaled = np.clip(np.nan_to_num(pixels.astype(np.float32), nan=0.0), 0.0, 1.0) * 255.0
    return np.ascontiguousarray(np.round(scaled).astype(np.uint8))


def encode_image(image: np.ndarray, fmt: str, quality: int = 90) -> bytes:
    """One HxWx3 image as png, jpeg or webp; `quality` (1..100) applies to jpeg and webp."""
    picture = Image.fromarray(to_uint8(image), mode="RGB")
    buffer = io.BytesIO()
    if fmt == "png":
        picture.save(buffer, format="PNG")
    elif fmt == "jpeg":
        picture.save(buffer, format="JPEG", quality=quality)
    elif fmt == "webp":
        picture.save(buffer, format="WEBP", quality=quality)
    else:
        raise EncodeError(f"image format {fmt!r} is not supported")
    return buffer.getvalue()


def encode_video(frames: np.ndarray, fmt: str, fps: int) -> bytes:
    """FxHxWx3 frames as mp4 (H.264), webm (VP9) or gif at `fps` frames per second."""
    if fmt not in _VIDEO_CODECS:
        raise EncodeError(f"video format {fmt!r} is not supported")
    container_format, codec, pixel_format = _VIDEO_CODECS[fmt]
    pixels = to_uint8(frames)
    if pixel_format == "yuv420p":
        pixels = _even_sized(pixels)
    _count, height, width, _channels = pixels.shape
    buffer = io.BytesIO()
    try:
        with av.open(buffer, mode="w", format=container_format, options=_BITEXACT) as container:
            stream: Any = container.add_stream(codec, rate=fps, options=_VIDEO_OPTIONS[fmt])
            stream.width, stream.height, stream.pix_fmt = width, height, pixel_format
            stream.time_base = Fraction(1, fps)
            _encode_all(container, stream, _video_frames(pixels, pixel_format, fps))
    except av.FFmpegError as exc:
        raise EncodeError(f"cannot encode {fmt}: {exc}") from exc
    return buffer.getvalue()


def _video_frames(pixels: np.ndarray, pixel_format: str, fps: int) -> Iterator[av.VideoFrame]:
    for index, frame_pixels in enumerate(pixels):
        if pixel_format == "pal8":
            frame = _palette_frame(frame_pixels)
        else:
            frame = av.VideoFrame.from_ndarray(frame_pixels, format="rgb24")
            frame = frame.reformat(format=pixel_format)
        frame.pts = index
        frame.time_base = Fraction(1, fps)
        yield frame


def _encode_all(container: Any, stream: Any, frames: Iterable[Any]) -> None:
    """Encodes every frame, then drains the encoder, muxing each packet as it comes; one
    frame at a time, so a long clip is never held twice."""
    for frame in itertools.chain(frames, [None]):
        for packet in stream.encode(frame):
            container.mux(packet)


def _palette_frame(pixels: np.ndarray) -> av.VideoFrame:
    # FFmpeg's scaler cannot make a palette; Pillow picks 256 colours for each frame.
    quantized = Image.fromarray(pixels, mode="RGB").quantize(colors=256)
    rgb = np.zeros((256, 3), dtype=np.uint8)
    used = np.frombuffer(bytes(quantized.getpalette() or []), dtype=np.uint8).reshape(-1, 3)
    rgb[: min(len(used), 256)] = used[:256]
    argb = np.concatenate([np.full((256, 1), 255, dtype=np.uint8), rgb], axis=1)
    indices = np.asarray(quantized, dtype=np.uint8)
    # The stubs omit the (image, palette) pair that PyAV documents for pal8.
    return av.VideoFrame.from_ndarray((indices, argb), format="pal8")  # type: ignore[arg-type]


def _even_sized(pixels: np.ndarray) -> np.ndarray:
    # 4:2:0 chroma is half resolution, so H.264 and VP9 need even sides: repeat the edge.
    _count, height, width, _channels = pixels.shape
    pad_height, pad_width = height % 2, width % 2
    if not pad_height and not pad_width:
        return pixels
    return np.pad(pixels, ((0, 0), (0, pad_height), (0, pad_width), (0, 0)), mode="edge")


def encode_audio(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """(channels, samples) or (samples,) float audio in [-1, 1] as wav, flac, ogg (Vorbis),
    mp3, opus or aac; the compressed three at the nearest sample rate their codec takes."""
    if audio.ndim == 1:
        audio = audio[None, :]
    # Clipping keeps PCM from wrapping around.
    clipped = np.clip(np.nan_to_num(audio.astype(np.float32)), -1.0, 1.0)
    if fmt in _COMPRESSED_AUDIO:
        return _encode_compressed_audio(clipped, sample_rate, fmt)
    if fmt not in _AUDIO_SUBTYPES:
        raise EncodeError(f"audio format {fmt!r} is not supported")
    container_format, subtype = _AUDIO_SUBTYPES[fmt]
    # soundfile takes (samples, channels).
    samples = clipped.T
    buffer = io.BytesIO()
    try:
        soundfile.write(buffer, samples, sample_rate, format=container_format, subtype=subtype)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as exc:
        raise EncodeError(f"cannot encode {fmt}: {exc}") from exc
    if container_format == "OGG":
        return with_fixed_serial(buffer.getvalue())
    return buffer.getvalue()


def codec_sample_rate(supported: Sequence[int], rate: int) -> int:
    """The rate to encode audio of `rate` at: its own where the codec takes it, else the
    lowest higher one (upsampling loses nothing), else the highest."""
    if not supported or rate in supported:
        return rate
    # Not below the telephone rate: AAC's 7350 Hz is in its table, but not every player's.
    higher = [r for r in supported if r > rate and r >= 8000]
    return min(higher) if higher else max(supported)


def _encode_compressed_audio(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    container_format, codec_name, sample_format = _COMPRESSED_AUDIO[fmt]
    channels = audio.shape[0]
    if channels > 2:
        raise EncodeError(f"cannot encode {fmt}: {channels} channels; it takes 1 or 2")
    layout = "mono" if channels == 1 else "stereo"
    codec = av.codec.Codec(codec_name, "w")
    rate = codec_sample_rate(codec.audio_rates or (), sample_rate)
    source = av.AudioFrame.from_ndarray(np.ascontiguousarray(audio), format="fltp", layout=layout)
    source.sample_rate = sample_rate
    source.pts = 0
    # libswresample's filter band-limits the change of rate, as FFmpeg itself would.
    resampler = av.AudioResampler(format=sample_format, layout=layout, rate=rate)
    buffer = io.BytesIO()
    try:
        with av.open(buffer, mode="w", format=container_format, options=_BITEXACT) as container:
            stream: Any = container.add_stream(codec_name, rate=rate)
            stream.layout = layout
            stream.codec_context.flags |= av.codec.context.Flags.bitexact
            _encode_all(container, stream, [*resampler.resample(source), *resampler.resample(None)])
    except av.FFmpegError as exc:
        raise EncodeError(f"cannot encode {fmt}: {exc}") from exc
    return buffer.getvalue()


def encode_result(
    spec: ModelSpec, output: Any, generation: GenerationParams, sample_rate: int = 0
) -> tuple[bytes, str]:
    """One job's output (an image, frames or audio as numpy) in the job's format: (bytes,
    mime). A job recorded before formats existed carries none and gets the model's defaults."""
    fmt = generation.output_format or spec.default_output_format
    if fmt not in FORMATS_BY_MODALITY[spec.modality]:
        raise EncodeError(f"{fmt!r} cannot encode {spec.modality}")
    pixels_or_audio = np.asarray(output)
    if spec.modality == "image":
        data = encode_image(pixels_or_audio, fmt, generation.output_quality or spec.output.quality)
    elif spec.modality == "video":
        data = encode_video(pixels_or_audio, fmt, generation.fps or spec.output.fps)
    else:
        data = encode_audio(pixels_or_audio, sample_rate, fmt)
    return data, MIME_TYPES[fmt]
