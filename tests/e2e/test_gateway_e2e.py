"""The public gateway as users reach it through `mediamesh up`: tritonclient, grpcurl with an
API key, `mediamesh generate` past the inline limit, and `mediamesh batch`."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

KEY = "e2e-tenant-key"
GRPCURL = shutil.which("grpcurl") or str(ROOT / ".venv" / "bin" / "grpcurl")
SECTIONS = {
    "gateway": {
        "api_keys": [{"sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": "e2e"}],
        "tenants": {"e2e": {"requests_per_second": 200, "burst": 400}},
        "inline_result_limit_bytes": 1024,
        "download_chunk_bytes": 1024,
    },
    # The worker is on-demand; let BATCH work use it at once instead of waiting for spot.
    "scheduler": {
        "placement": {
            "REALTIME": {"prefer": "on-demand", "allow": ["on-demand"]},
            "STANDARD": {"prefer": "on-demand", "allow": ["on-demand"]},
            "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 0},
        }
    },
}


def grpcurl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60
    )


def test_gateway_apis_through_mediamesh_up(launch, tmp_path: Path):
    mesh = launch([{"models": ["flux-tiny", "echo"]}], **SECTIONS)

    probe = subprocess.run(
        [sys.executable, "-m", "tests.service.gateway.triton_probe", mesh.gateway,
         "health", "infer", "echo", "--api-key", KEY],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    report = json.loads(probe.stdout)
    assert report["health"]["ready"] and report["health"]["echo_ready"]
    # Each 48x32 PNG is above the 1 KiB inline limit: the gateway downloaded them internally.
    assert report["infer"]["sizes"] == [[48, 32]] * 3 and report["infer"]["seeds"] == [7, 8, 9]

    services = grpcurl(mesh.gateway, "list").stdout.split()
    assert {"mediamesh.v1.Gateway", "inference.GRPCInferenceService"} <= set(services)
    body = json.dumps({"model": "echo", "prompt": "hello", "seed": 3})
    refused = grpcurl("-d", body, mesh.gateway, "mediamesh.v1.Gateway/Submit")
    assert refused.returncode != 0 and "Unauthenticated" in refused.stderr
    header = f"authorization: Bearer {KEY}"
    accepted = grpcurl("-H", header, "-d", body, mesh.gateway, "mediamesh.v1.Gateway/Submit")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["job_id"]
    metadata = grpcurl("-H", header, "-d", '{"name": "echo"}', mesh.gateway,
                       "inference.GRPCInferenceService/ModelMetadata")  # fmt: skip
    assert metadata.returncode == 0 and '"platform": "mediamesh_Echo"' in metadata.stdout
    # The probe's three flux-tiny jobs, counted by the scheduler process.
    statistics = grpcurl("-H", header, "-d", '{"name": "flux-tiny"}', mesh.gateway,
                         "inference.GRPCInferenceService/ModelStatistics")  # fmt: skip
    assert statistics.returncode == 0, statistics.stderr
    (flux,) = json.loads(statistics.stdout)["model_stats"]
    assert flux["inference_count"] == "3"
    assert flux["inference_stats"]["success"]["count"] == "3"

    fox = tmp_path / "fox.png"
    generated = mesh.cli(
        "generate", "--gateway", mesh.gateway, "--api-key", KEY, "--model", "flux-tiny",
        "--prompt", "a red fox", "--steps", "1", "--seed", "2", "--out", str(fox), "--quiet",
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    assert fox.stat().st_size > 1024 and Image.open(fox).size == (64, 64)

    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(40)))
    batch = mesh.cli(
        "batch", str(prompts), "--out", str(out), "--model", "echo",
        "--gateway", mesh.gateway, "--api-key", KEY,
    )  # fmt: skip
    assert batch.returncode == 0, batch.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(r["line"] for r in rows if r["state"] == "SUCCEEDED") == list(range(1, 41))
    assert len({r["job_id"] for r in rows}) == 40
