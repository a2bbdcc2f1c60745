"""`mediamesh generate --out` takes the extension of the result's format."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.following import result_path


@pytest.mark.parametrize(
    ("out", "mime", "written"),
    [
        ("r/fox.png", "image/png", "r/fox.png"),
        ("r/fox.png", "image/webp", "r/fox.webp"),
        ("r/fox", "video/webm", "r/fox.webm"),
        ("r/fox.JPEG", "image/jpeg", "r/fox.JPEG"),
        ("r/fox.png", "image/jpeg", "r/fox.jpg"),
        ("r/clip.wav", "audio/flac", "r/clip.flac"),
        ("r/clip.mp4", "image/gif", "r/clip.gif"),
        ("r/blob", "application/x-unknown", "r/blob.bin"),
    ],
)
def test_the_written_file_is_named_after_the_result_format(
    out: str, mime: str, written: str
) -> None:
    assert result_path(Path(out), mime) == Path(written)
