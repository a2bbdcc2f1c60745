from __future__ import annotations

import numpy as np
import pytest

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec, parse_registry
from mediamesh.worker.models import encode
from tests.media import decode_audio, decode_compressed_audio, decode_image, decode_video


def _frames(count: int, height: int, width: int) -> np.ndarray:
    # Smooth ramps that move frame to frame: what lossy codecs keep well, so a decoded
    # frame can be compared with what went in.
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    clips = []
    for index in range(count):
        shift = index / max(count, 1)
        clips.append(
            np.stack(
                [(xs / width + shift) % 1.0, ys / height, np.full_like(xs, 0.5 - shift / 2)],
                axis=-1,
            )
        )
    return np.stack(clips)


def _tone(rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds), dtype=np.float32) / rate
    left = 0.5 * np.sin(2 * np.pi * 220 * t)
    return np.stack([left, -left])


@pytest.mark.parametrize(
    ("fmt", "pillow_name"), [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")]
)
def test_images_decode_with_pillow_at_their_size(fmt: str, pillow_name: str) -> None:
    image = _frames(1, 24, 40)[0]
    decoded = decode_image(encode.encode_image(image, fmt, quality=90))
    assert decoded.format == pillow_name
    assert decoded.size == (40, 24)
    pixels = np.asarray(decoded.convert("RGB"), dtype=np.float32)
    assert np.abs(pixels - image * 255).mean() < 6


def test_png_clips_out_of_range_floats() -> None:
    decoded = decode_image(encode.encode_image(np.full((8, 8, 3), 1.7, np.float32), "png"))
    assert np.asarray(decoded).min() == 255


def test_lower_quality_gives_smaller_lossy_images() -> None:
    noisy = np.random.default_rng(0).random((64, 64, 3)).astype(np.float32)
    for fmt in ("jpeg", "webp"):
        assert len(encode.encode_image(noisy, fmt, 10)) < len(encode.encode_image(noisy, fmt, 95))


@pytest.mark.parametrize(("fmt", "codec"), [("mp4", "h264"), ("webm", "vp9"), ("gif", "gif")])
def test_video_decodes_with_pyav_with_every_frame(fmt: str, codec: str) -> None:
    frames = _frames(9, 32, 48)
    video = decode_video(encode.encode_video(frames, fmt, fps=8))
    assert video.codec == codec
    assert video.frames.shape == (9, 32, 48, 3)
    assert video.rate is not None and abs(float(video.rate) - 8) < 0.5
    error = np.abs(video.frames.astype(np.float32) - frames * 255).mean()
    assert error < 12, f"{fmt} frames differ from the input by {error:.1f} levels on average"


def test_odd_sized_frames_are_padded_for_yuv420() -> None:
    video = decode_video(encode.encode_video(_frames(3, 15, 17), "mp4", fps=4))
    assert video.frames.shape == (3, 16, 18, 3)


def test_gif_keeps_identical_frames_as_frames() -> None:
    still = np.repeat(_frames(1, 16, 16), 4, axis=0)
    assert decode_video(encode.encode_video(still, "gif", fps=10)).frames.shape[0] == 4


@pytest.mark.parametrize(
    ("fmt", "kind"), [("wav", "WAV/PCM_16"), ("flac", "FLAC/PCM_24"), ("ogg", "OGG/VORBIS")]
)
def test_audio_decodes_with_soundfile_at_its_rate_and_length(fmt: str, kind: str) -> None:
    rate = 4000
    audio = _tone(rate, 0.75)
    samples, decoded_rate, decoded_kind = decode_audio(encode.encode_audio(audio, rate, fmt))
    assert decoded_kind == kind
    assert decoded_rate == rate
    assert samples.shape == (audio.shape[1], 2)
    if fmt != "ogg":  # Vorbis is lossy; the lossless two must give the samples back
        assert np.abs(samples.T - audio).max() < 1e-3


@pytest.mark.parametrize(
    ("fmt", "container", "codec", "rate"),
    [("mp3", "mp3", "mp3float", 8000), ("opus", "ogg", "opus", 48000), ("aac", "aac", "aac", 8000)],
)
def test_compressed_audio_decodes_with_ffmpeg_at_a_rate_its_codec_takes(
    fmt: str, container: str, codec: str, rate: int
) -> None:
    # 4 kHz is no rate MP3, Opus or AAC carry: resampled up to their lowest above it.
    audio = _tone(4000, 0.75)
    data = encode.encode_audio(audio, 4000, fmt)
    decoded = decode_compressed_audio(data)
    assert (decoded.container, decoded.codec, decoded.channels) == (container, codec, 2)
    assert decoded.rate == rate
    seconds = decoded.samples.shape[1] / decoded.rate
    # AAC in ADTS has no gapless header: its encoder's priming and padding frames stay.
    assert 0.75 <= seconds <= 0.75 + (2048 / 8000 if fmt == "aac" else 0.01)
    assert np.abs(decoded.samples).max() > 0.1
    # Bit-exact: the same samples make the same file (no random Ogg serial, no version tag).
    assert encode.encode_audio(audio, 4000, fmt) == data


def test_audio_at_a_rate_its_codec_takes_keeps_that_rate() -> None:
    decoded = decode_compressed_audio(encode.encode_audio(_tone(44100, 0.2), 44100, "mp3"))
    assert decoded.rate == 44100
    mono = decode_compressed_audio(encode.encode_audio(_tone(16000, 0.2)[:1], 16000, "aac"))
    assert (mono.rate, mono.channels) == (16000, 1)


def test_codec_sample_rate_goes_up_to_the_nearest_taken_rate() -> None:
    rates = (48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
    assert encode.codec_sample_rate(rates, 44100) == 44100
    assert encode.codec_sample_rate(rates, 4000) == 8000  # not 7350, which players may not
    assert encode.codec_sample_rate(rates, 20000) == 22050
    assert encode.codec_sample_rate(rates, 96000) == 48000
    assert encode.codec_sample_rate((), 5000) == 5000


def test_more_than_two_channels_are_refused_for_mp3() -> None:
    with pytest.raises(encode.EncodeError, match="3 channels"):
        encode.encode_audio(np.zeros((3, 800), dtype=np.float32), 8000, "mp3")


def test_audio_is_clipped_not_wrapped() -> None:
    loud = np.full((1, 400), 3.0, dtype=np.float32)
    samples, _rate, _kind = decode_audio(encode.encode_audio(loud, 8000, "flac"))
    assert samples.min() > 0.99


def test_unknown_formats_raise_encode_error() -> None:
    with pytest.raises(encode.EncodeError, match="bmp"):
        encode.encode_image(np.zeros((4, 4, 3)), "bmp")
    with pytest.raises(encode.EncodeError, match="avi"):
        encode.encode_video(_frames(2, 8, 8), "avi", fps=8)
    with pytest.raises(encode.EncodeError, match="pcm"):
        encode.encode_audio(np.zeros((1, 10)), 8000, "pcm")


def _spec(modality: str, **entry: object) -> ModelSpec:
    base = {
        "name": "m",
        "modality": modality,
        "pipeline": "Echo" if modality == "image" else "X",
        "source": "builtin",
        "defaults": {"width": 16, "height": 16, "num_frames": 3, "duration_s": 1.0},
        "limits": {"max_width": 64, "max_height": 64, "max_num_frames": 9, "max_duration_s": 5},
        **entry,
    }
    return parse_registry({"models": [base]}).models[0]


def test_encode_result_follows_the_job_and_the_model_defaults() -> None:
    image_model = _spec("image", output={"format": "webp", "quality": 50})
    data, mime = encode.encode_result(
        image_model, _frames(1, 16, 16)[0], GenerationParams("x", output_format="jpeg")
    )
    assert mime == "image/jpeg" and decode_image(data).format == "JPEG"
    # A job recorded before formats existed names none: the model's default applies.
    data, mime = encode.encode_result(image_model, _frames(1, 16, 16)[0], GenerationParams("x"))
    assert mime == "image/webp" and decode_image(data).format == "WEBP"
    video_model = _spec("video", output={"fps": 5})
    data, mime = encode.encode_result(
        video_model, _frames(3, 16, 16), GenerationParams("x", output_format="webm")
    )
    assert mime == "video/webm" and decode_video(data).codec == "vp9"
    audio_model = _spec("audio")
    data, mime = encode.encode_result(
        audio_model, _tone(8000, 0.5), GenerationParams("x", output_format="flac"), 8000
    )
    assert mime == "audio/flac" and decode_audio(data)[1] == 8000


def test_encode_result_refuses_a_format_of_another_modality() -> None:
    with pytest.raises(encode.EncodeError, match="cannot encode image"):
        encode.encode_result(
            _spec("image"), _frames(1, 8, 8)[0], GenerationParams("x", output_format="mp4")
        )
