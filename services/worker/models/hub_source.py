"""A worker's start-up check of hub entries and hub adapters: in the cache, fetched if
allowed, or one line naming `mediamesh models pull`."""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.adapter_hub import Downloader, hub_adapters, pull_adapter
from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.hub import HubModelMissing, ensure_local
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError


def fetch_if_allowed(
    spec: ModelSpec, models_dir: Path, allow_downloads: bool, download: Downloader | None = None
) -> None:
    """Makes sure a hub entry and its hub adapters are in the Hugging Face cache before its
    pipeline loads.

    With `allow_downloads` the missing files are fetched (huggingface_hub reads HF_TOKEN);
    without it a missing model or adapter raises ModelLoadError naming `mediamesh models pull`."""
    try:
        ensure_local(spec, models_dir, allow_downloads=allow_downloads, download=download)
    except HubModelMissing as exc:
        raise ModelLoadError(str(exc)) from None
    for adapter in hub_adapters(spec, models_dir):
        if allow_downloads and cached_adapter(adapter, download) is None:
            pull_adapter(adapter, token=None, download=download)
        if cached_adapter(adapter, download) is None:
            raise ModelLoadError(adapter_missing_message(spec, adapter))


def cached_adapter(adapter: AdapterSpec, download: Downloader | None = None) -> Path | None:
    """The cached snapshot folder holding a hub adapter's weights, or None if absent.

    Reads only the cache. Loading from this folder, rather than from the hub id, is what
    keeps diffusers from asking the hub which weights file the repository has."""
    fetch = download or _snapshot_download()
    try:
        folder = Path(fetch(adapter.source, local_files_only=True))
    except Exception:
        # The hub library signals a cache miss with several error types; all mean "absent".
        return None
    if adapter.weight_name:
        return folder if (folder / adapter.weight_name).is_file() else None
    # diffusers picks the weights among the folder's top-level safetensors files.
    return folder if any(folder.glob("*.safetensors")) else None


def adapter_missing_message(spec: ModelSpec, adapter: AdapterSpec) -> str:
    """The one line a worker fails with when a hub adapter has not been pulled."""
    weights = f" ({adapter.weight_name})" if adapter.weight_name else ""
    return (
        f"model {spec.name!r} adapter {adapter.name!r}: {adapter.source}{weights} is not in "
        f"the Hugging Face cache; run `mediamesh models pull {spec.name}` first (or set "
        "allow_downloads: true on the worker)"
    )


def _snapshot_download() -> Downloader:
    from huggingface_hub import snapshot_download

    return snapshot_download
