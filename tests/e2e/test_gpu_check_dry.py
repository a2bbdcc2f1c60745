"""`make gpu-check`'s CPU dry mode: every mode and batch measured, one mesh run, JSON out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
