"""The HTTP face of a mesh started with `mediamesh up`: curl follows a job's events, the
result comes over HTTP and the job is then deleted, and the official openai client generates
an image."""

from __future__ import annotations

import base64
import shutil
import subprocess

import httpx
import openai
import pytest

from tests.e2e.conftest import port_bound, stop

pytestmark = pytest.mark.e2e
PNG = b"\x89PNG\r\n\x1a\n"


def follow(url: str) -> str:
    """The job's event stream as `curl -N URL` prints it (httpx where curl is missing)."""
    curl = shutil.which("curl")
    if curl is not None:
        result = subprocess.run(
            [curl, "-N", "-s", "--max-time", "120", url],
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout
    with httpx.stream("GET", url, timeout=120) as response:
        return "".join(response.iter_text())


def test_up_serves_http_events_results_the_openai_api_and_audio(launch):
    mesh = launch([{"models": ["flux-tiny", "stable-audio-tiny"]}])
    port = mesh.config["gateway"]["http_port"]
    base = f"http://127.0.0.1:{port}"
    assert any(f"http {base}" in line for line in mesh.output if line.startswith("mediamesh ready"))

    job = httpx.post(
        f"{base}/v1/jobs",
        json={"model": "flux-tiny", "prompt": "a red fox", "steps": 2},
        timeout=60,
    )
    assert job.status_code == 202, job.text
    job_id = job.json()["job_id"]
    stream = follow(f"{base}/v1/jobs/{job_id}/events")
    assert "event: progress" in stream and "event: result" in stream and "id: end" in stream
    result = httpx.get(f"{base}/v1/jobs/{job_id}/result", timeout=60)
    assert result.status_code == 200 and result.content.startswith(PNG)
    deleted = httpx.delete(f"{base}/v1/jobs/{job_id}/record", timeout=30)
    assert deleted.status_code == 200 and deleted.json()["result_bytes"] == len(result.content)
    for gone in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/result"):
        assert httpx.get(base + gone, timeout=30).status_code == 404

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused-on-an-open-mesh", max_retries=0)
    images = client.images.generate(
        model="flux-tiny", prompt="a red fox", size="64x64", extra_body={"steps": 2}
    )
    assert base64.b64decode((images.data or [])[0].b64_json or "").startswith(PNG)
    assert "flux-tiny" in [m.id for m in client.models.list()]
    client.close()

    # vLLM-Omni's audio route: the clip as a WAV file.
    audio = httpx.post(
        f"{base}/v1/audio/generate",
        json={"input": "rain on a tin roof", "audio_length": 0.5, "num_inference_steps": 2},
        timeout=120,
    )
    assert audio.status_code == 200, audio.text
    assert audio.headers["content-type"] == "audio/wav" and audio.content.startswith(b"RIFF")

    stop(mesh)
    assert not port_bound(port), "the HTTP port is free after Ctrl-C"
