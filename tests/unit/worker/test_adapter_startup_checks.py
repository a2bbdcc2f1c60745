"""Adapters a worker could never apply stop it at start, in one line naming the model, the
adapter and what to do: a hub adapter not pulled, a local path that does not exist, a
pipeline without LoRA support, the builtin Echo. No model weights are read here."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings
from mediamesh.worker.hosting import load_host
from mediamesh.worker.main import go_offline, load_hosts
from mediamesh.worker.models.adapters import refuse_unusable_adapters
from mediamesh.worker.models.hub_source import fetch_if_allowed
from mediamesh.worker.models.memory import ModelLoadError


def entry(model: str, *adapters: dict, **fields: object) -> ModelSpec:
    spec = load_registry().get(model)
    assert spec is not None
    return ModelSpec.model_validate({**spec.model_dump(), **fields, "adapters": list(adapters)})


class CacheOf:
    """snapshot_download over a made-up cache: the repos in `cached` answer a folder under
    `root` (which the test fills), others miss; downloads are written down and cache them."""

    def __init__(self, root: Path, cached: set[str]) -> None:
        self.root = root
        self.cached = set(cached)
        self.downloads: list[tuple[str, dict]] = []

    def __call__(self, repo_id: str, **options: object) -> str:
        folder = self.root / repo_id
        if options.get("local_files_only"):
            if repo_id not in self.cached:
                raise OSError("not cached")
            return str(folder)
        self.downloads.append((repo_id, options))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pytorch_lora_weights.safetensors").write_bytes(b"weights")
        self.cached.add(repo_id)
        return str(folder)


def test_a_hub_adapter_not_pulled_names_the_model_the_adapter_and_the_pull(
    tmp_path: Path,
) -> None:
    spec = entry("flux-tiny", {"name": "hubby", "source": "someorg/some-lora"})
    with pytest.raises(ModelLoadError) as raised:
        fetch_if_allowed(spec, tmp_path, allow_downloads=False, download=CacheOf(tmp_path, set()))
    assert str(raised.value) == (
        "model 'flux-tiny' adapter 'hubby': someorg/some-lora is not in the Hugging Face "
        "cache; run `mediamesh models pull flux-tiny` first (or set allow_downloads: true on "
        "the worker)"
    )


def test_a_pulled_hub_adapter_passes_and_needs_its_weights_file(tmp_path: Path) -> None:
    folder = tmp_path / "someorg" / "some-lora"
    folder.mkdir(parents=True)
    (folder / "ink.safetensors").write_bytes(b"weights")
    cache = CacheOf(tmp_path, {"someorg/some-lora"})
    plain = entry("flux-tiny", {"name": "hubby", "source": "someorg/some-lora"})
    fetch_if_allowed(plain, tmp_path, allow_downloads=False, download=cache)
    named = entry(
        "flux-tiny",
        {"name": "hubby", "source": "someorg/some-lora", "weight_name": "other.safetensors"},
    )
    with pytest.raises(ModelLoadError, match=r"some-lora \(other.safetensors\) is not in"):
        fetch_if_allowed(named, tmp_path, allow_downloads=False, download=cache)


def test_with_downloads_allowed_a_missing_hub_adapter_is_fetched(tmp_path: Path) -> None:
    cache = CacheOf(tmp_path, set())
    spec = entry("flux-tiny", {"name": "hubby", "source": "someorg/some-lora"})
    fetch_if_allowed(spec, tmp_path, allow_downloads=True, download=cache)
    assert cache.downloads == [
        ("someorg/some-lora", {"allow_patterns": ["*.safetensors"], "token": None})
    ]


@pytest.mark.parametrize(
    "source", ["{models_dir}/no-such-lora", "/tmp/no-such-lora-mediamesh", "./no-such-lora"]
)
def test_a_local_adapter_path_that_does_not_exist_stops_the_start(
    tmp_path: Path, source: str
) -> None:
    spec = entry("flux-tiny", {"name": "missing", "source": source})
    path = source.replace("{models_dir}", str(tmp_path))
    with pytest.raises(ModelLoadError) as raised:
        refuse_unusable_adapters(spec, tmp_path)
    message = str(raised.value)
    assert message.startswith(f"model 'flux-tiny' adapter 'missing': {path} does not exist")
    assert "\n" not in message


def test_existing_local_and_hub_adapters_pass_the_path_check(tmp_path: Path) -> None:
    (tmp_path / "lora").mkdir()
    spec = entry(
        "flux-tiny",
        {"name": "here", "source": "{models_dir}/lora"},
        {"name": "hubby", "source": "someorg/some-lora"},
    )
    refuse_unusable_adapters(spec, tmp_path)


@pytest.mark.parametrize(
    ("model", "pipeline"), [("stable-audio-tiny", "StableAudioPipeline"), ("echo", "Echo")]
)
def test_adapters_on_a_pipeline_without_lora_support_are_refused(
    tmp_path: Path, model: str, pipeline: str
) -> None:
    (tmp_path / "lora").mkdir()
    spec = entry(model, {"name": "style", "source": "{models_dir}/lora"})
    with pytest.raises(ModelLoadError) as raised:
        refuse_unusable_adapters(spec, tmp_path)
    assert str(raised.value) == (
        f"model {model!r} field adapters: pipeline {pipeline} cannot load LoRA adapters; "
        "remove `adapters` from the entry"
    )


def test_the_echo_host_refuses_adapters_rather_than_ignore_them(tmp_path: Path) -> None:
    (tmp_path / "lora").mkdir()
    spec = entry("echo", {"name": "style", "source": "{models_dir}/lora"})
    with pytest.raises(ModelLoadError, match="model 'echo' field adapters: the builtin Echo"):
        load_host(spec, models_dir=tmp_path, device="cpu", checkpoint_dir=tmp_path)


async def test_the_worker_start_refuses_before_loading_any_model(tmp_path: Path) -> None:
    # Hosted cold under residency limits, the entry would otherwise load only at its first job.
    good = entry("echo", name="echo-a")
    bad = entry("echo", {"name": "style", "source": "{models_dir}/missing"}, name="echo-b")
    config = MeshConfig(models_dir=tmp_path, workers=[])
    settings = WorkerSettings(
        models=["echo-a", "echo-b"],
        max_resident_models=1,
        checkpoint_dir=tmp_path,
        metrics_port=None,
    )
    with pytest.raises(ModelLoadError, match="model 'echo-b' field adapters"):
        await asyncio.to_thread(load_hosts, config, settings, [good, bad])


def test_a_worker_without_downloads_turns_the_loaded_hub_library_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    go_offline()
    assert huggingface_hub.constants.is_offline_mode()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
