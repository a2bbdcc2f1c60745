"""The encodings a result may take, by modality, with their MIME types and file extensions.

Pure: the registry narrows these per model, request validation checks a request against
them, the worker encodes in them, and the CLI names result files after them.
"""

from __future__ import annotations

from collections.abc import Mapping

# The first format of each modality is the default of a model whose registry entry names none.
FORMATS_BY_MODALITY: Mapping[str, tuple[str, ...]] = {
    "image": ("png", "jpeg", "webp"),
    "video": ("mp4", "webm", "gif"),
    "audio": ("wav", "flac", "ogg", "mp3", "opus", "aac"),
}
ALL_FORMATS = tuple(fmt for formats in FORMATS_BY_MODALITY.values() for fmt in formats)
# Image formats whose encoder takes a quality; png is lossless.
LOSSY_IMAGE_FORMATS = frozenset({"jpeg", "webp"})

MIME_TYPES: Mapping[str, str] = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "gif": "image/gif",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "mp3": "audio/mpeg",
    # Opus in Ogg; "audio/opus" rather than "audio/ogg" tells it from Vorbis by its type.
    "opus": "audio/opus",
    "aac": "audio/aac",
    "bin": "application/octet-stream",
}
# File name extension of a result by MIME type (jpeg is written .jpg, as most tools expect).
EXTENSIONS: Mapping[str, str] = {
    mime: ("jpg" if fmt == "jpeg" else fmt) for fmt, mime in MIME_TYPES.items()
}

QUALITY_RANGE = (1, 100)
FPS_RANGE = (1, 60)
# A GIF frame's delay is whole hundredths of a second, and browsers show a delay of one
# hundredth (what 51-60 fps needs for some frames) as ten: a 60 fps GIF would play at a
# third of its speed, unevenly.
GIF_MAX_FPS = 50


def fps_range(output_format: str) -> tuple[int, int]:
    """The frame rates a video in `output_format` can be played at as asked."""
    return (FPS_RANGE[0], GIF_MAX_FPS) if output_format == "gif" else FPS_RANGE


def extension_for(mime_type: str) -> str:
    """The file extension of a result of `mime_type`; "bin" when unknown."""
    return EXTENSIONS.get(mime_type, "bin")
