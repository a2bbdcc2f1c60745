"""Hub entries through `mediamesh up`: served from an offline-built Hugging Face cache, and
a model that is not in the cache fails the worker's start with one line naming the pull.

HF_HUB_CACHE is set in the environment the mesh is spawned with, so every process reads
it at its own start, as a deployment would set it.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import yaml

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.e2e.conftest import mesh_config
from tests.e2e.test_bad_registry import run_up
from tests.hub_cache import add_to_hub_cache

pytestmark = pytest.mark.e2e

HUB_ENTRY = {
    "name": "hub-flux",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "tiny-org/flux-tiny",
    "defaults": {"steps": 4, "width": 64, "height": 64},
    "limits": {"max_steps": 50, "max_width": 512, "max_height": 512},
    "output": {"format": "png"},
}


def registry_file(tmp: Path, **fields: object) -> Path:
    path = tmp / "registry.yaml"
    path.write_text(yaml.safe_dump({"models": [{**HUB_ENTRY, **fields}]}, sort_keys=False))
    return path


def test_a_hub_model_in_the_cache_is_served(
    launch, tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hf-cache"
    add_to_hub_cache(cache, "tiny-org/flux-tiny", models_dir / "flux-tiny")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    mesh = launch([{"models": ["hub-flux"]}], registry_path=str(registry_file(tmp_path)))
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        (listed,) = stub.ListModels(gateway_pb2.ListModelsRequest()).models
        # The scheduler read the scheduler class from the cached snapshot.
        assert (listed.name, listed.ready, listed.preemption) == ("hub-flux", True, "resume")
        events = list(
            stub.Generate(common_pb2.GenerateRequest(model="hub-flux", prompt="a cat", seed=1))
        )
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    assert [e.progress.step for e in events if e.HasField("progress")] == [1, 2, 3, 4]


def test_a_hub_model_not_in_the_cache_fails_the_worker_with_one_line(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty-cache").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    config = mesh_config(tmp_path, models_dir, [{"models": ["hub-flux"]}])
    config["registry_path"] = str(registry_file(tmp_path, revision="v1"))
    result = run_up(tmp_path, config, timeout_s=240)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mediamesh:")]
    assert len(errors) == 1, result.stderr
    for phrase in ("'hub-flux'", "tiny-org/flux-tiny at revision v1", "mediamesh models pull"):
        assert phrase in errors[0], errors[0]
