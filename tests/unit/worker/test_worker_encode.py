from __future__ import annotations

import io
import wave

import imageio_ffmpeg
import numpy as np
import pytest
from PIL import Image

from mediamesh.worker.models import encode


def _frames(count: int, height: int, width: int) -> np.ndarray:
    ramp = np.linspace(0.0, 1.0, count * height * width * 3, dtype=np.float32)
    return ramp.reshape(count, height, width, 3)


def test_png_keeps_size_and_clips_floats() -> None:
    image = np.full((24, 40, 3), 1.7, dtype=np.float32)
    decoded = Image.open(io.BytesIO(encode.encode_png(image)))
    assert decoded.size == (40, 24) and decoded.mode == "RGB"
    assert np.asarray(decoded).min() == 255


@pytest.mark.parametrize(("height", "width"), [(32, 48), (31, 45)])
def test_mp4_has_every_frame_at_the_requested_rate(tmp_path, height, width) -> None:
    data = encode.encode_mp4(_frames(9, height, width), fps=8)
    target = tmp_path / "out.mp4"
    target.write_bytes(data)
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(target))
    assert frames == 9
    assert seconds == pytest.approx(9 / 8, abs=0.2)
    reader = imageio_ffmpeg.read_frames(str(target))
    meta = next(reader)
    reader.close()
    # Odd sizes are padded up to even ones for yuv420p.
    assert tuple(meta["size"]) == (width + width % 2, height + height % 2)


def test_webp_is_animated_with_all_frames() -> None:
    data = encode.encode_webp(_frames(5, 16, 16), fps=4)
    decoded = Image.open(io.BytesIO(data))
    assert decoded.format == "WEBP" and decoded.n_frames == 5 and decoded.size == (16, 16)


def test_video_falls_back_to_webp_when_ffmpeg_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: "/nonexistent/ffmpeg")
    data, mime = encode.encode_video(_frames(3, 16, 16), fps=8, fmt="mp4", fallback="webp")
    assert mime == "image/webp"
    assert Image.open(io.BytesIO(data)).n_frames == 3


def test_video_without_fallback_raises_encode_error(monkeypatch) -> None:
    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: "/nonexistent/ffmpeg")
    with pytest.raises(encode.EncodeError):
        encode.encode_video(_frames(3, 16, 16), fps=8, fmt="mp4")


def test_wav_is_16_bit_pcm_of_the_right_duration() -> None:
    rate = 4000
    tone = np.sin(np.linspace(0, 200 * np.pi, rate // 2, dtype=np.float32))
    data = encode.encode_wav(np.stack([tone, -tone * 2]), rate)
    with wave.open(io.BytesIO(data)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (2, 2, rate)
        assert reader.getnframes() == rate // 2
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").reshape(-1, 2)
    assert pcm[:, 1].min() == -32767  # out-of-range samples clip instead of wrapping
