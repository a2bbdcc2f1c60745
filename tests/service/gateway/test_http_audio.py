"""POST /v1/audio/generate as vLLM-Omni's clients call it: a Stable Audio model's clip as a
file, decoded with soundfile; fields the mesh cannot honour refused, named as sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio

from mediamesh.gateway.core.tenancy import hash_key
from tests.media import decode_audio, decode_compressed_audio
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT
from tests.service.gateway.http_support import base_url, bearer

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUICK = {"num_inference_steps": 2, "audio_length": 0.5}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def audio_mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> AsyncIterator[InProcessMesh]:
    """Stable Audio and echo (an image model) on one worker, the HTTP face, tenant a's key."""
    mesh = await start_mesh(
        tmp_path_factory.mktemp("audio"),
        models_dir,
        [["stable-audio-tiny", "echo"]],
        gateway={"http_port": 0, "api_keys": [{"sha256": hash_key(KEY_A), "tenant": "a"}]},
        scheduler=NO_SPOT_WAIT,
    )
    yield mesh
    await stop_mesh(mesh)


@pytest_asyncio.fixture(loop_scope="module")
async def client(audio_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=base_url(audio_mesh), headers=bearer(KEY_A), timeout=120
    ) as http:
        yield http


async def test_a_clip_comes_back_as_a_file_of_the_asked_length_and_format(client):
    body = {"input": "a dog barking", "seed": 3, **QUICK}
    first = await client.post("/v1/audio/generate", json=body)
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "audio/wav"
    samples, rate, kind = decode_audio(first.content)
    assert kind == "WAV/PCM_16"
    assert samples.shape[0] == pytest.approx(0.5 * rate, abs=0.02 * rate)
    assert np.abs(samples).max() > 0
    # The same seed makes the same clip; the model's only model, chosen without a name.
    again = await client.post("/v1/audio/generate", json={**body, "model": "stable-audio-tiny"})
    assert again.content == first.content

    flac = await client.post(
        "/v1/audio/generate", json={**body, "response_format": "flac", "speed": 1.0}
    )
    assert flac.status_code == 200, flac.text
    assert flac.headers["content-type"] == "audio/flac"
    assert decode_audio(flac.content)[2].startswith("FLAC/")


@pytest.mark.parametrize(
    ("fmt", "mime", "codec"),
    [
        ("mp3", "audio/mpeg", "mp3float"),
        ("opus", "audio/opus", "opus"),
        ("aac", "audio/aac", "aac"),
    ],
)
async def test_the_compressed_formats_of_openai_clients_come_back_playable(
    client, fmt, mime, codec
):
    body = {"input": "a dog barking", "seed": 3, "response_format": fmt, **QUICK}
    answer = await client.post("/v1/audio/generate", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == mime
    decoded = decode_compressed_audio(answer.content)
    assert decoded.codec == codec and decoded.channels == 2
    # stable-audio-tiny's 4 kHz is no rate these codecs carry; its clip is resampled.
    assert decoded.samples.shape[1] / decoded.rate == pytest.approx(0.5, abs=0.3)
    again = await client.post("/v1/audio/generate", json=body)
    assert again.content == answer.content


@pytest.mark.parametrize(
    ("fields", "status", "start"),
    [
        ({"response_format": "pcm"}, 400, "response_format: 'pcm' "),
        ({"speed": 1.5}, 400, "speed: 1.5 is not offered"),
        ({"audio_start": 2}, 400, "audio_start: 2 is not offered"),
        ({"audio_length": 60}, 400, "audio_length: "),
        ({"num_inference_steps": 999}, 400, "num_inference_steps: "),
        ({"voice": "alloy"}, 400, "voice: not a field of audio generation"),
        ({"model": "echo"}, 400, "model: 'echo' makes image"),
        ({"model": "nope"}, 404, "model: 'nope' is not served"),
        ({"input": None}, 400, "input"),
    ],
)
async def test_what_the_mesh_cannot_honour_is_refused_naming_the_field(
    client, fields, status, start
):
    answer = await client.post("/v1/audio/generate", json={"input": "rain", **QUICK, **fields})
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]["message"]
    assert start in message if fields.get("input", "") is None else message.startswith(start)


async def test_no_key_no_audio(audio_mesh):
    async with httpx.AsyncClient(base_url=base_url(audio_mesh), timeout=30) as anonymous:
        answer = await anonymous.post("/v1/audio/generate", json={"input": "rain"})
    assert answer.status_code == 401


async def test_a_clip_is_as_long_as_asked_to_the_sample(client):
    # 1.3 is no float32: read as the wire's 1.2999999523, 1.3 s at 4 kHz was 5199 samples.
    answer = await client.post(
        "/v1/audio/generate", json={"input": "rain", **QUICK, "audio_length": 1.3}
    )
    assert answer.status_code == 200, answer.text
    samples, rate, _ = decode_audio(answer.content)
    assert samples.shape[0] == round(1.3 * rate)


async def test_a_jobs_own_refusal_names_the_field_as_sent(client):
    # Past the tiny tokenizer's window: the worker refuses it, naming its prompt, which this
    # face calls input.
    words = " ".join(f"word{i}" for i in range(60))
    answer = await client.post("/v1/audio/generate", json={"input": words, **QUICK})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["message"].startswith("input: ") and error["param"] == "input", error
