"""`mediamesh up` with a registry entry it cannot build or load: one line naming the entry."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.e2e.conftest import mesh_config

pytestmark = pytest.mark.e2e

# A user's own model: under {models_dir}, but not one of the tiny models mediamesh can build.
CUSTOM_ENTRY = {
    "name": "my-own-model",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "{models_dir}/my-own-model",
    "defaults": {"steps": 4, "width": 64, "height": 64},
    "limits": {"max_steps": 50, "max_width": 512, "max_height": 512},
    "output": {"format": "png"},
}


def run_up(
    tmp: Path, config: Mapping[str, object], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`mediamesh up` until it exits; its whole process group is killed whatever happens."""
    config_path = tmp / "mesh.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAMESH_")}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "mediamesh.cli.main", "up", "--config", str(config_path)),
            *("--run-dir", str(tmp / "run"), "--ready-timeout", "120"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**env, "HF_HUB_OFFLINE": "1"},
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children that outlived it, if any
        process.wait(10)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def registry_with_custom_model(tmp: Path) -> Path:
    path = tmp / "registry.yaml"
    path.write_text(yaml.safe_dump({"models": [CUSTOM_ENTRY]}, sort_keys=False))
    return path


def assert_one_line_naming_the_entry(
    result: subprocess.CompletedProcess[str], *phrases: str
) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mediamesh:")]
    assert len(errors) == 1, result.stderr
    for phrase in ("'my-own-model'", *phrases):
        assert phrase in errors[0], errors[0]
    return errors[0]


def test_an_entry_under_models_dir_that_cannot_be_built_stops_up_before_it_starts(
    tmp_path: Path,
):
    config = {
        "models_dir": str(tmp_path / "models"),
        "registry_path": str(registry_with_custom_model(tmp_path)),
    }
    result = run_up(tmp_path, config, timeout_s=180)
    assert_one_line_naming_the_entry(
        result, str(tmp_path / "models" / "my-own-model"), "remove the entry"
    )
    assert not (tmp_path / "run").exists(), "no process should have been started"


def test_an_entry_a_worker_cannot_load_is_named_by_up(tmp_path: Path):
    models_dir = tmp_path / "models"
    (models_dir / "my-own-model").mkdir(parents=True)  # a folder, but no model in it
    config = mesh_config(tmp_path, models_dir, [{"models": ["my-own-model"]}])
    config["registry_path"] = str(registry_with_custom_model(tmp_path))
    result = run_up(tmp_path, config, timeout_s=240)
    line = assert_one_line_naming_the_entry(result, "worker-0 exited during start-up")
    assert "model_index.json" in line  # the loader's own reason, not just "see the log"


def test_a_folder_saved_for_another_pipeline_class_is_named_by_up(tmp_path: Path, models_dir: Path):
    own_models = tmp_path / "models"
    shutil.copytree(models_dir / "flux-tiny", own_models / "my-own-model")
    config = mesh_config(tmp_path, own_models, [{"models": ["my-own-model"]}])
    # A video entry, as WanPipeline makes (an image one is refused before any worker starts).
    entry = {
        **CUSTOM_ENTRY,
        "modality": "video",
        "pipeline": "WanPipeline",
        "defaults": {"steps": 4, "width": 64, "height": 64, "num_frames": 9},
        "limits": {**CUSTOM_ENTRY["limits"], "max_num_frames": 9, "frame_multiple": 4},
        "output": {"format": "mp4"},
    }
    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump({"models": [entry]}, sort_keys=False))
    config["registry_path"] = str(registry)
    result = run_up(tmp_path, config, timeout_s=240)
    line = assert_one_line_naming_the_entry(
        result,
        "worker-0 exited during start-up",
        f"(source {own_models / 'my-own-model'}): cannot be loaded as WanPipeline: AttributeError",
        "the folder was saved as FluxPipeline",
    )
    assert "scale_factor_temporal" in line  # the loader's own reason
