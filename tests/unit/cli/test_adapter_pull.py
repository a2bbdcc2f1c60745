"""`mediamesh models pull` brings an entry's hub LoRA adapters along with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.models_commands import pull_models
from mediamesh.common.adapter_hub import is_hub_adapter
from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.registry import load_registry, parse_registry


class RecordingDownloader:
    """snapshot_download as calls written down; answers a made-up cache folder."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, repo_id: str, **options: object) -> str:
        self.calls.append((repo_id, options))
        return f"/cache/{repo_id}"


def registry_with(source: str, adapters: list[dict]):
    entry = load_registry().get("flux-tiny").model_dump(mode="json")
    entry.update(name="flux-hub", source=source, adapters=adapters)
    return parse_registry({"models": [entry]})


def test_hub_adapters_are_pulled_with_their_model(tmp_path: Path) -> None:
    registry = registry_with(
        "org/flux",
        [
            {"name": "ink", "source": "org/ink-lora", "weight_name": "ink.safetensors"},
            {"name": "local", "source": "{models_dir}/local-lora"},
        ],
    )
    download = RecordingDownloader()
    lines = pull_models(registry, ["flux-hub"], tmp_path, token="t", download=download)
    assert [repo for repo, _ in download.calls] == ["org/flux", "org/ink-lora"]
    assert download.calls[1][1] == {"allow_patterns": ["ink.safetensors"], "token": "t"}
    assert lines[-1] == "flux-hub adapter ink: org/ink-lora -> /cache/org/ink-lora"


def test_a_local_model_with_hub_adapters_pulls_only_the_adapters(tmp_path: Path) -> None:
    registry = registry_with("{models_dir}/flux-tiny", [{"name": "ink", "source": "org/ink"}])
    download = RecordingDownloader()
    pull_models(registry, ["flux-hub"], tmp_path, token=None, download=download)
    assert download.calls == [("org/ink", {"allow_patterns": ["*.safetensors"], "token": None})]
    local = registry_with("{models_dir}/flux-tiny", [{"name": "a", "source": "{models_dir}/a"}])
    with pytest.raises(ValueError, match="nothing to pull"):
        pull_models(local, ["flux-hub"], tmp_path, token=None, download=download)


def test_which_adapter_sources_are_hub_ids(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    for source, hub in (
        ("org/lora", True),
        ("lora", True),
        ("{models_dir}/lora", False),
        ("/abs/lora.safetensors", False),
        (str(tmp_path / "here"), False),
        ("a/b/c", False),
    ):
        assert is_hub_adapter(AdapterSpec(name="x", source=source), tmp_path) is hub, source
