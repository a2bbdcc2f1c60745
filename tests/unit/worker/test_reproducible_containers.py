"""One seed, one file: every output format gives the same bytes for the same samples in
separate processes, the containers that draw random ids (Ogg, Matroska) included."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys

import pytest

from mediamesh.worker.models.ogg_pages import (
    FIXED_SERIAL,
    OggPageError,
    page_crc,
    with_fixed_serial,
)

# Run in a fresh interpreter each time: libsndfile and FFmpeg seed their random ids per
# process, so two encodings in one process can agree where two processes would not.
_ENCODE_ALL = """
import hashlib, numpy as np
from mediamesh.worker.models.encode import encode_audio, encode_image, encode_video
audio = np.random.default_rng(1).standard_normal(16000).astype(np.float32) * 0.2
frames = np.random.default_rng(2).random((9, 32, 32, 3)).astype(np.float32)
sounds = ("wav", "flac", "ogg", "mp3", "opus", "aac")
digests = {fmt: encode_audio(audio, 16000, fmt) for fmt in sounds}
digests |= {fmt: encode_video(frames, fmt, 8) for fmt in ("mp4", "webm", "gif")}
digests |= {fmt: encode_image(frames[0], fmt) for fmt in ("png", "jpeg", "webp")}
for fmt, data in sorted(digests.items()):
    print(fmt, hashlib.sha256(data).hexdigest())
"""


def _digests() -> str:
    run = subprocess.run(
        [sys.executable, "-c", _ENCODE_ALL], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_every_format_gives_the_same_bytes_in_two_processes() -> None:
    first, second = _digests(), _digests()
    assert len(first.splitlines()) == 12
    assert first == second


def _pages(data: bytes) -> list[bytes]:
    pages, at = [], 0
    while at < len(data):
        segments = data[at + 26]
        size = 27 + segments + sum(data[at + 27 : at + 27 + segments])
        pages.append(data[at : at + size])
        at += size
    return pages


def test_ogg_pages_get_the_fixed_serial_and_a_checksum_that_holds() -> None:
    import io

    import numpy as np
    import soundfile

    buffer = io.BytesIO()
    samples = np.random.default_rng(3).standard_normal(48000).astype(np.float32) * 0.1
    soundfile.write(buffer, samples, 16000, format="OGG", subtype="VORBIS")
    original = buffer.getvalue()
    fixed = with_fixed_serial(original)
    assert len(fixed) == len(original)
    pages = _pages(fixed)
    assert len(pages) > 2
    for index, page in enumerate(pages):
        serial, sequence, crc = struct.unpack_from("<III", page, 14)
        assert serial == FIXED_SERIAL and sequence == index
        assert page_crc(page[:22] + bytes(4) + page[26:]) == crc
    # Only the serials and checksums moved: what libvorbis decodes is unchanged.
    decoded, _rate = soundfile.read(io.BytesIO(fixed), dtype="float32")
    expected, _rate = soundfile.read(io.BytesIO(original), dtype="float32")
    assert np.array_equal(decoded, expected)
    assert hashlib.sha256(with_fixed_serial(fixed)).digest() == hashlib.sha256(fixed).digest()


def test_the_ogg_crc_is_the_one_the_spec_defines() -> None:
    # CRC-32 with polynomial 0x04C11DB7, no reflection, initial value 0 and no final
    # inversion: its check value (over the ASCII digits 1 to 9) is 0x89A1897F.
    assert page_crc(b"123456789") == 0x89A1897F


@pytest.mark.parametrize("data", [b"not ogg", b"OggS" + bytes(30)])
def test_bytes_that_are_not_whole_pages_are_refused(data: bytes) -> None:
    with pytest.raises(OggPageError):
        with_fixed_serial(data)
