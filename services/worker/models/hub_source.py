"""A worker's start-up check of hub entries: in the cache, fetched if allowed, or one line."""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.hub import HubModelMissing, ensure_local
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError


def fetch_if_allowed(spec: ModelSpec, models_dir: Path, allow_downloads: bool) -> None:
    """Makes sure a hub entry is in the Hugging Face cache before its pipeline loads.

    With `allow_downloads` the missing files are fetched (huggingface_hub reads HF_TOKEN);
    without it a missing model raises ModelLoadError naming `mediamesh models pull`."""
    try:
        ensure_local(spec, models_dir, allow_downloads=allow_downloads)
    except HubModelMissing as exc:
        raise ModelLoadError(str(exc)) from None
