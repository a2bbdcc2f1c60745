"""The mesh as a user runs it: `mediamesh up`, the CLI, grpcurl, and a clean Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.conftest import ROOT
from tests.e2e.conftest import port_bound, stop

pytestmark = pytest.mark.e2e

GRPCURL = shutil.which("grpcurl") or str(ROOT / ".venv" / "bin" / "grpcurl")
IMAGE_WORKERS = [{"models": ["flux-tiny", "echo"]}, {"models": ["flux-tiny", "echo"]}]


def grpcurl(*args: str) -> str:
    result = subprocess.run(
        [GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_up_generate_grpcurl_and_clean_stop(launch, tmp_path: Path):
    previous = os.umask(0o022)  # a common default, under which files are world-readable
    try:
        mesh = launch(IMAGE_WORKERS)
    finally:
        os.umask(previous)
    assert any(line.startswith("mediamesh ready: gateway 127.0.0.1:") for line in mesh.output)

    out = tmp_path / "fox.png"
    result = mesh.cli(
        "generate",
        "--gateway",
        mesh.gateway,
        "--model",
        "flux-tiny",
        "--prompt",
        "a red fox",
        "--steps",
        "4",
        "--width",
        "96",
        "--height",
        "64",
        "--seed",
        "11",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert "denoising" in result.stderr  # the progress bar
    assert Image.open(out).size == (96, 64)
    # The result file's extension follows the requested format, whatever --out said.
    result = mesh.cli(
        "generate", "--gateway", mesh.gateway, "--model", "flux-tiny", "--prompt", "a fox",
        "--steps", "1", "--output-format", "webp", "--output-quality", "80", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert Image.open(out.with_suffix(".webp")).format == "WEBP"

    services = grpcurl(mesh.gateway, "list").split()
    assert {"mediamesh.v1.Gateway", "grpc.health.v1.Health"} <= set(services)
    assert "rpc Generate" in grpcurl(mesh.gateway, "describe", "mediamesh.v1.Gateway")
    # A method by its own name too (grpcio-reflection's pool alone could not find one).
    submit = grpcurl(mesh.gateway, "describe", "mediamesh.v1.Gateway.Submit")
    assert "mediamesh.v1.Gateway.Submit is a method" in submit and "rpc Submit" in submit
    # The scheduler's reflection describes the internal API, so it needs the mesh's token
    # (minted by `mediamesh up` into the run's config, mode 0600).
    refused = subprocess.run(
        [GRPCURL, "-plaintext", mesh.scheduler, "list"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "Unauthenticated" in refused.stderr
    run_config = yaml.safe_load((mesh.run_dir / "mesh.yaml").read_text())
    token = run_config["internal_auth"]["token"]
    assert "mediamesh.v1.Scheduler" in grpcurl(
        "-H", f"x-mediamesh-token: {token}", mesh.scheduler, "list"
    )
    body = json.dumps({"model": "flux-tiny", "prompt": "a red fox", "steps": 3, "seed": 5})
    stream = grpcurl("-d", body, mesh.gateway, "mediamesh.v1.Gateway/Generate")
    events = [json.loads(chunk) for chunk in _json_objects(stream)]
    progress = [e["progress"] for e in events if "progress" in e]
    assert [p["step"] for p in progress] == [1, 2, 3]
    final = events[-1]
    assert final["state"] == "SUCCEEDED" and final["result"]["mime_type"] == "image/png"
    import base64

    png = Image.open(io.BytesIO(base64.b64decode(final["result"]["data"])))
    assert png.size == (64, 64)

    # The run directory `up` wrote its config (and internal token) to, as without --config.
    status = mesh.cli("status", "--run-dir", str(mesh.run_dir))
    assert status.returncode == 0 and "worker-0" in status.stdout and "SUCCEEDED=3" in status.stdout
    # The scheduler's counts of the three flux-tiny jobs: model, succeeded, failed, ...
    models = status.stdout.split("MODELS\n", 1)[1].splitlines()
    assert models[1].split()[:3] == ["flux-tiny", "3", "0"]
    top = mesh.cli(
        "top", "--config", str(mesh.config_path), "--iterations", "2", "--interval", "0.1"
    )
    assert top.returncode == 0 and top.stdout.count("QUEUES") == 2

    assert_private(tmp_path / "state", tmp_path / "artifacts", mesh.run_dir)

    ports = mesh.ports()
    stop(mesh)
    assert mesh.process.returncode == 0
    assert not [p for p in ports if port_bound(p)], "a port is still bound after stop"


def assert_private(*folders: Path) -> None:
    """What the mesh wrote (the job store, results, inputs, logs, the run's config) holds
    prompts and generations: its user's alone, whatever umask `up` was started with."""
    written = [path for folder in folders for path in (folder, *folder.rglob("*"))]
    assert any(path.name.endswith(".sqlite3") for path in written)
    assert {"gateway.log", "scheduler.log", "mesh.yaml", "uploads"} <= {p.name for p in written}
    shared = [
        f"{path} {stat.filemode(path.stat().st_mode)}"
        for path in written
        if path.stat().st_mode & 0o077
    ]
    assert not shared


def _json_objects(text: str) -> list[str]:
    """grpcurl prints one pretty JSON object per message, back to back."""
    objects, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                objects.append(text[start : index + 1])
    return objects
