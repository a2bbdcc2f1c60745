"""A hub entry's `revision` and `variant` reach `from_pretrained` through the worker's own
load path, reading a hub-layout cache built offline. Each load runs in a child process
with HF_HUB_CACHE in its environment, as a deployed worker gets it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from diffusers import DiffusionPipeline

from mediamesh.worker.models.build import COMPLETE_MARKER
from tests.conftest import ROOT
from tests.hub_cache import add_to_hub_cache

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
LOAD_AND_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, "tests/service/worker_models")
from wm_helpers import job_for, of, run
from mediamesh.common.registry import parse_registry
from mediamesh.common.work import JobFinished, StepDone
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.memory import ModelLoadError
spec = parse_registry({"models": [json.loads(sys.argv[1])]}).models[0]
try:
    host = load_host(spec, models_dir=Path("/nonexistent"), device="cpu",
                     checkpoint_dir=Path(sys.argv[2]))
except ModelLoadError as exc:
    print("LOAD-ERROR " + str(exc))
    raise SystemExit(0)
events = run(host, [job_for(spec, "a", seed=1)])
print("STEPS", [e.step for e in of(events, "a", StepDone)], len(of(events, "a", JobFinished)))
"""


@pytest.fixture(scope="module")
def fp16_named_cache(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """flux-tiny saved with only `*.fp16.safetensors` weight files (float32 inside: the
    variant is a file name), in the cache as tiny-org/flux-variant at COMMIT, branch main."""
    root = tmp_path_factory.mktemp("hub")
    pipeline = DiffusionPipeline.from_pretrained(models_dir / "flux-tiny", local_files_only=True)
    pipeline.save_pretrained(root / "model", safe_serialization=True, variant="fp16")
    (root / "model" / COMPLETE_MARKER).unlink(missing_ok=True)
    add_to_hub_cache(root / "cache", "tiny-org/flux-variant", root / "model", COMMIT)
    return root / "cache"


def _load_in_child(cache: Path, tmp_path: Path, **fields: object) -> str:
    entry = {
        "name": "hub-variant",
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": "tiny-org/flux-variant",
        "defaults": {"steps": 3, "width": 64, "height": 64},
        "limits": {"max_width": 512, "max_height": 512},
        **fields,
    }
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, json.dumps(entry), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_variant_and_pinned_revision_load_and_run(fp16_named_cache: Path, tmp_path: Path) -> None:
    line = _load_in_child(fp16_named_cache, tmp_path, variant="fp16", revision=COMMIT)
    assert line == "STEPS [1, 2, 3] 1"


def test_without_the_variant_the_worker_says_what_it_cannot_load(
    fp16_named_cache: Path, tmp_path: Path
) -> None:
    line = _load_in_child(fp16_named_cache, tmp_path)
    assert line.startswith("LOAD-ERROR model 'hub-variant' (source "), line
    assert "cannot be loaded as FluxPipeline" in line, line


def test_a_revision_not_in_the_cache_names_the_pull(fp16_named_cache: Path, tmp_path: Path) -> None:
    line = _load_in_child(fp16_named_cache, tmp_path, variant="fp16", revision="v2")
    assert "mediamesh models pull hub-variant" in line, line
