"""Hub entries: cache lookup at a revision, `models pull`, and the worker's start-up rule.

There is no hub here: the cache is built offline in the hub layout, and pulls go to a
hand-written downloader that records its arguments and writes what a download would.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import snapshot_download

from mediamesh.cli.models_commands import pull_models
from mediamesh.common.hub import (
    HubModelMissing,
    cached_snapshot,
    ensure_local,
    is_hub_source,
    pull,
    pull_patterns,
)
from mediamesh.common.registry import ModelSpec, Registry, parse_registry
from tests.hub_cache import COMMIT, add_to_hub_cache

MODELS_DIR = Path("/nonexistent/models")


def hub_entry(name: str = "hub-flux", **fields: Any) -> ModelSpec:
    entry = {
        "name": name,
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": "tiny-org/flux-tiny",
        "defaults": {"steps": 4, "width": 64, "height": 64},
        "limits": {"max_width": 512, "max_height": 512},
        **fields,
    }
    return parse_registry({"models": [entry]}).models[0]


def tiny_model_folder(root: Path) -> Path:
    folder = root / "model"
    (folder / "scheduler").mkdir(parents=True)
    (folder / "model_index.json").write_text('{"_class_name": "FluxPipeline"}')
    (folder / "scheduler" / "scheduler_config.json").write_text(
        '{"_class_name": "FlowMatchEulerDiscreteScheduler"}'
    )
    return folder


class RecordingDownloader:
    """Stands in for `snapshot_download`: a cache that starts empty and fills on a pull."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.snapshot = root / "snapshot"

    def __call__(self, repo_id: str, **options: Any) -> str:
        self.calls.append((repo_id, options))
        if options.get("local_files_only"):
            if not (self.snapshot / "model_index.json").is_file():
                raise FileNotFoundError(repo_id)
            return str(self.snapshot)
        self.snapshot.mkdir(parents=True, exist_ok=True)
        (self.snapshot / "model_index.json").write_text("{}")
        return str(self.snapshot)


def test_hub_ids_are_told_from_local_folders(tmp_path: Path) -> None:
    assert is_hub_source(hub_entry(), MODELS_DIR)
    assert is_hub_source(hub_entry(source="stabilityai/stable-diffusion-xl-base-1.0"), MODELS_DIR)
    assert not is_hub_source(hub_entry(source="{models_dir}/flux-tiny"), MODELS_DIR)
    assert not is_hub_source(hub_entry(source="/srv/models/flux"), MODELS_DIR)
    assert not is_hub_source(hub_entry(source="./flux"), MODELS_DIR)
    (tmp_path / "org" / "local").mkdir(parents=True)
    relative = hub_entry(source=str(tmp_path / "org" / "local"))
    assert not is_hub_source(relative, MODELS_DIR)


def test_the_cache_is_read_at_the_entry_revision_offline(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    add_to_hub_cache(cache, "tiny-org/flux-tiny", tiny_model_folder(tmp_path))
    other = "f" * 40
    add_to_hub_cache(cache, "tiny-org/flux-tiny", tiny_model_folder(tmp_path / "b"), other, "v2")
    # The real hub library, reading only the offline-built cache.
    reader = functools.partial(snapshot_download, cache_dir=cache)
    assert cached_snapshot(hub_entry(), reader) == (
        cache / "models--tiny-org--flux-tiny" / "snapshots" / COMMIT
    )
    pinned = cached_snapshot(hub_entry(revision=other), reader)
    assert pinned is not None and pinned.name == other
    branch = cached_snapshot(hub_entry(revision="v2"), reader)
    assert branch is not None and branch.name == other
    assert cached_snapshot(hub_entry(revision="v3"), reader) is None
    assert cached_snapshot(hub_entry(source="tiny-org/absent"), reader) is None


def test_pull_fetches_the_variant_at_the_revision_with_the_token(tmp_path: Path) -> None:
    downloader = RecordingDownloader(tmp_path)
    spec = hub_entry(revision="v1.0", variant="fp16")
    assert pull(spec, token="hf_secret", download=downloader) == downloader.snapshot
    ((repo, options),) = downloader.calls
    assert repo == "tiny-org/flux-tiny"
    assert options["revision"] == "v1.0" and options["token"] == "hf_secret"
    assert "*/*.fp16.safetensors" in options["allow_patterns"]
    assert "*/*.safetensors" not in options["allow_patterns"]


def test_a_plain_entry_skips_other_variants_and_root_checkpoints() -> None:
    allow, ignore = pull_patterns(None)
    assert "*/*.safetensors" in allow and "*.safetensors" not in allow
    assert "*.fp16.*" in ignore
    assert {"*.json", "*.txt", "*.model"} <= set(allow)


def test_models_pull_names_each_entry_and_refuses_local_ones(tmp_path: Path) -> None:
    registry = Registry(models=[hub_entry(), hub_entry("local", source="{models_dir}/x")])
    downloader = RecordingDownloader(tmp_path)
    lines = pull_models(registry, ["hub-flux"], MODELS_DIR, token=None, download=downloader)
    assert lines == [f"hub-flux: tiny-org/flux-tiny -> {downloader.snapshot}"]
    with pytest.raises(ValueError, match="not a hub id"):
        pull_models(registry, ["local"], MODELS_DIR, token=None, download=downloader)
    with pytest.raises(ValueError, match="nope: not in the registry"):
        pull_models(registry, ["hub-flux", "nope"], MODELS_DIR, token=None, download=downloader)
    assert len(downloader.calls) == 1, "nothing is pulled when any name is wrong"


def test_a_missing_model_fails_with_one_line_naming_the_pull(tmp_path: Path) -> None:
    downloader = RecordingDownloader(tmp_path)
    with pytest.raises(HubModelMissing) as caught:
        ensure_local(hub_entry(), MODELS_DIR, allow_downloads=False, download=downloader)
    message = str(caught.value)
    assert "\n" not in message
    assert "'hub-flux'" in message and "`mediamesh models pull hub-flux`" in message
    assert all(options.get("local_files_only") for _, options in downloader.calls)


def test_allow_downloads_fetches_then_loads_from_the_cache(tmp_path: Path) -> None:
    downloader = RecordingDownloader(tmp_path)
    found = ensure_local(hub_entry(), MODELS_DIR, allow_downloads=True, download=downloader)
    assert found == downloader.snapshot
    kinds = [bool(options.get("local_files_only")) for _, options in downloader.calls]
    assert kinds == [True, False, True]  # miss, download, found
    local = hub_entry(source="{models_dir}/flux-tiny")
    assert ensure_local(local, MODELS_DIR, allow_downloads=True, download=downloader) is None
