"""`make gpu-wheels` and scripts/gpu_check.sh: what a bare CUDA machine gets carried to it.

The lent GPU machines have no package index. Their image holds torch, transformers and many
other packages, but not all of mediamesh's dependencies: `make gpu-wheels` downloads the
missing ones (bench/gpu_check_launch.py), and the device script installs them offline.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_check_launch as launch
from tests.unit.deploy.deploy_support import ROOT

# What the project's runtime dependencies come to on that image (see the module's lists).
EXPECTED = {
    "annotated-types",
    "cffi",
    "diffusers",
    "fastapi",
    "googleapis-common-protos",
    "grpcio",
    "grpcio-health-checking",
    "grpcio-reflection",
    "importlib-metadata",
    "lazy-importer",
    "opentelemetry-api",
    "opentelemetry-exporter-otlp-common",
    "opentelemetry-exporter-otlp-proto-common",
    "opentelemetry-exporter-otlp-proto-grpc",
    "opentelemetry-instrumentation",
    "opentelemetry-instrumentation-grpc",
    "opentelemetry-proto",
    "opentelemetry-sdk",
    "opentelemetry-semantic-conventions",
    "protobuf",
    "pycparser",
    "pydantic",
    "pydantic-core",
    "pydantic-settings",
    "python-dotenv",
    "python-multipart",
    "soundfile",
    "starlette",
    "typing-extensions",
    "typing-inspection",
    "uvicorn",
}


def test_carried_wheels_are_the_dependencies_the_image_lacks_at_this_venvs_versions():
    pins = launch.carried()
    assert set(pins) == EXPECTED, sorted(set(pins) ^ EXPECTED)
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, name
    # The image's own torch (a CUDA build) and Hugging Face stack are never replaced...
    for provided in ("torch", "transformers", "huggingface-hub", "accelerate", "numpy"):
        assert provided not in pins
    # ...nor are the dependencies of this venv's newer versions of them carried.
    assert "httpx2" not in pins
    # Left behind for their size: gpu-check uses neither.
    assert not set(pins) & set(launch.LEFT_BEHIND)


class FakeDistribution:
    """Just what `carried` reads of an installed distribution."""

    def __init__(self, version: str, requires: list[str]) -> None:
        self.version = version
        self.requires = requires


def test_walk_stops_at_the_image_follows_extras_and_skips_markers():
    installed = {
        "root": FakeDistribution(
            "1", ["lib[fast]", "torch", "av", "grpcio", "dev-only; extra == 'dev'"]
        ),
        "lib": FakeDistribution("2.0", ["speedup; extra == 'fast'", "old; python_version < '3'"]),
        "speedup": FakeDistribution("3.1", []),
        "torch": FakeDistribution("9", ["never-followed"]),
        "grpcio": FakeDistribution("1.85.3", ["typing-extensions"]),
        "typing-extensions": FakeDistribution("4.16.0", []),
    }
    pins = launch.carried("root", lambda name: installed[launch.canonical(name)])
    assert pins == {
        "grpcio": "1.85.3",
        "lib": "2.0",
        "speedup": "3.1",
        "typing-extensions": "4.16.0",
    }


def test_left_behind_modules_are_not_needed_to_start_the_mesh(tmp_path: Path):
    """obstore is imported only for the S3 store; av, imported by the worker's encoders at
    start-up, gets a stand-in that imports but fails when used."""
    written = launch.write_stand_ins(tmp_path, find=lambda _: None)
    assert written == [tmp_path / "av"]
    script = """
import sys
sys.modules["obstore"] = None  # not installed: any import of it fails
import av
import bench.gpu_check, bench.launcher, bench.loadgen
import mediamesh.gateway.main, mediamesh.scheduler.main, mediamesh.worker.main
import mediamesh.worker.models.pipeline_host
assert av.__file__.startswith(sys.argv[1]), av.__file__
try:
    av.open
except ModuleNotFoundError as exc:
    print("stand-in:", exc)
else:
    raise AssertionError("the stand-in lets av.open through")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "av is not installed here" in done.stdout


def test_stand_ins_leave_an_importable_module_alone(tmp_path: Path):
    assert launch.write_stand_ins(tmp_path, find=lambda _: object()) == []
    assert not list(tmp_path.iterdir())


def test_wheels_folder_is_ignored_and_the_make_targets_use_it():
    """.whl/ travels with a device call only when carried; git must never pick it up."""
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".whl/x-1-py3-none-any.whl"], cwd=ROOT, check=False
    )
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0, ".whl/ is not ignored"
    makefile = (ROOT / "Makefile").read_text()
    assert "gpu-wheels: setup\n\t$(PY) -m bench.gpu_check_launch wheels --dest .whl\n" in makefile
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    assert "--no-index --no-deps" in script and "WHEELS=${GPU_CHECK_WHEELS:-.whl}" in script


def test_make_gpu_check_runs_the_dry_path_without_cuda():
    """`make gpu-check` where torch sees no CUDA device: the CPU dry run, written outside
    bench/results so it never stands for a GPU result."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "gpu-check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "-m bench.gpu_check --dry --out .mediamesh/gpu_check-dry.json" in done.stdout
    assert "torch.cuda.is_available()" in done.stdout
