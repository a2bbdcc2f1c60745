"""`make gpu-check`'s CPU dry mode: every mode and batch measured, one mesh run, JSON out;
and the device script (scripts/gpu_check.sh) that runs it on a bare CUDA machine."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


def test_gpu_check_dry_writes_every_measurement(tmp_path: Path, models_dir: Path) -> None:
    out = tmp_path / "gpu_check.json"
    argv = [sys.executable, "-m", "bench.gpu_check", "--dry", "--out", str(out)]
    done = subprocess.run(
        [*argv, "--models-dir", str(models_dir)],
        cwd=ROOT,
        env={**os.environ, "MEDIAMESH_MODELS_DIR": str(models_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads(out.read_text())
    assert record["dry"] is True and record["device"] == "cpu"
    measured = {(row["mode"], row["batch"]) for row in record["steps"]}
    modes = ("eager", "regional_compile", "first_block_cache")
    assert measured == {(mode, batch) for mode in modes for batch in record["plan"]["batches"]}
    assert all(row["step_s"] > 0 and row["parameters"] > 0 for row in record["steps"])
    mesh = record["mesh"]
    assert mesh["errors"] == 0 and mesh["requests"] > 0
    assert 0 < mesh["p50_ms"] <= mesh["p99_ms"]
    # The dispatch-ahead tail A/B: one level per tail end, each a mesh of its own.
    tails = mesh["tail_end_ab"]
    assert sorted(row["tail_end"] for row in tails) == ["first_result", "last_result"]
    for row in tails:
        assert row["errors"] == 0 and row["requests"] > 0 and row["throughput_rps"] > 0
        assert row["mean_batch"] is not None and row["mean_batch"] >= 1


def probe_wheel(folder: Path) -> Path:
    """A one-module wheel standing in for .whl/ (the real wheels are for the device's CPython)."""
    files = {
        "gpucheck_probe/__init__.py": "VALUE = 1\n",
        "gpucheck_probe-0.1.dist-info/METADATA": (
            "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 0.1\n"
        ),
        "gpucheck_probe-0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append("gpucheck_probe-0.1.dist-info/RECORD,,")
    files["gpucheck_probe-0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gpucheck_probe-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_device_script_dry_run_writes_json_and_log_under_out(
    tmp_path: Path, models_dir: Path
) -> None:
    """scripts/gpu_check.sh, the one command of a device call, as it runs there: wheels from
    the carried folder into a site folder with no index, `mediamesh` mapped to services/ in
    it, and the JSON and log in $OUT, the only folder that comes back."""
    out, site = tmp_path / "out", tmp_path / "site"
    probe_wheel(tmp_path / "whl")
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "GPU_CHECK_WHEELS": str(tmp_path / "whl"),
        "GPU_CHECK_SITE": str(site),
        "MEDIAMESH_MODELS_DIR": str(models_dir),
        "PIP_NO_INDEX": "1",
    }
    done = subprocess.run(
        # One mode: the modes themselves are the test above's.
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry", "--no-mesh", "--modes", "eager"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    record = json.loads((out / "gpu_check.json").read_text())
    assert record["dry"] is True and record["mesh"] is None
    assert {row["mode"] for row in record["steps"]} == {"eager"}
    log = (out / "gpu_check.log").read_text()
    assert "installing 1 wheels" in log and f"wrote {out / 'gpu_check.json'}" in log
    assert (site / "gpucheck_probe" / "__init__.py").exists()
    assert (site / "mediamesh").resolve() == (ROOT / "services").resolve()
