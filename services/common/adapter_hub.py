"""LoRA adapters whose `source` is a Hugging Face hub id: which they are, and how
`mediamesh models pull` fetches them (next to their model) into the local cache, where a
worker's offline `load_lora_weights` finds them. No torch here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.registry import ModelSpec

Downloader = Callable[..., str]


def is_hub_adapter(adapter: AdapterSpec, models_dir: Path) -> bool:
    """True for an adapter loaded from the hub rather than from a local file or folder."""
    if "{models_dir}" in adapter.source:
        return False
    source = adapter.resolved_source(models_dir)
    if source.startswith(("/", ".", "~")) or Path(source).exists():
        return False
    parts = source.split("/")
    return 1 <= len(parts) <= 2 and all(parts)


def hub_adapters(spec: ModelSpec, models_dir: Path) -> list[AdapterSpec]:
    """The adapters of an entry that come from the hub."""
    return [a for a in spec.adapters if is_hub_adapter(a, models_dir)]


def pull_adapter(
    adapter: AdapterSpec, *, token: str | None, download: Downloader | None = None
) -> Path:
    """Downloads an adapter's weights file (or every safetensors file when it names none)
    into the Hugging Face cache; returns the snapshot folder."""
    fetch = download or _snapshot_download()
    options: dict[str, Any] = {
        "allow_patterns": [adapter.weight_name or "*.safetensors"],
        "token": token,
    }
    return Path(fetch(adapter.source, **options))


def _snapshot_download() -> Downloader:
    from huggingface_hub import snapshot_download

    return snapshot_download
