"""LoRA adapters as a user meets them through `mediamesh up`: the CLI's --adapter flag,
grpcurl with an `adapters` list, `mediamesh status` and the worker's metrics."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from tests.e2e.test_up import GRPCURL, _json_objects

pytestmark = pytest.mark.e2e


def test_generate_with_an_adapter_through_up(launch, tmp_path: Path) -> None:
    mesh = launch([{"models": ["flux-tiny"]}])

    def generate(out: Path, *extra: str) -> bytes:
        result = mesh.cli(
            "generate", "--gateway", mesh.gateway, "--model", "flux-tiny", "--prompt", "a fox",
            "--steps", "2", "--seed", "3", "--quiet", "--out", str(out), *extra,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return out.read_bytes()

    styled = generate(tmp_path / "styled.png", "--adapter", "style:0.8")
    plain = generate(tmp_path / "plain.png")
    assert Image.open(tmp_path / "styled.png").size == (64, 64)
    assert styled != plain

    # The README's grpcurl example, the same job by hand: the same image.
    body = json.dumps(
        {
            "model": "flux-tiny",
            "prompt": "a fox",
            "steps": 2,
            "seed": 3,
            "adapters": [{"name": "style", "scale": 0.8}],
        }
    )
    answer = subprocess.run(
        [GRPCURL, "-plaintext", "-d", body, mesh.gateway, "mediamesh.v1.Gateway/Generate"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    final = json.loads(list(_json_objects(answer.stdout))[-1])
    assert base64.b64decode(final["result"]["data"]) == styled

    bad = mesh.cli(
        "generate", "--gateway", mesh.gateway, "--model", "flux-tiny", "--prompt", "a fox",
        "--adapter", "sepia:1", "--quiet", "--out", str(tmp_path / "x.png"),
    )  # fmt: skip
    assert bad.returncode != 0 and "sepia" in bad.stderr + bad.stdout

    status = mesh.cli("status", "--run-dir", str(mesh.run_dir))
    assert status.returncode == 0, status.stderr
    (row,) = [line for line in status.stdout.splitlines() if line.startswith("worker-0")]
    assert row.split()[-1] == "flux-tiny:style"

    port = mesh.config["workers"][0]["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'mediamesh_adapter_loads_total{model="flux-tiny"} 1.0' in metrics
    assert 'mediamesh_adapter_load_seconds_count{model="flux-tiny"} 1.0' in metrics
