"""Registry entries whose `source` is a Hugging Face hub id: where they are cached, how
`mediamesh models pull` fetches them, and the one-line error for a model not pulled.

Workers load only from local files by default: a hub entry must be in the Hugging Face
cache (`HF_HUB_CACHE`, else `HF_HOME/hub`) first, put there by `mediamesh models pull NAME`
or by a worker with `allow_downloads: true`. Both fetch with `snapshot_download`, at the
entry's `revision`, only the files `from_pretrained` reads for its `variant`. No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediamesh.common.registry import ModelSpec

# "org/name" or "name", as the hub spells repository ids.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
# Configs, tokenizer vocabularies and sentencepiece models of every component.
_SUPPORT_FILES = ("*.json", "*.txt", "*.model")
# Weight files of other variants a plain entry must not download (repos ship several).
_OTHER_VARIANTS = ("*.fp16.*", "*.bf16.*", "*.fp32.*", "*.fp8.*")

Downloader = Callable[..., str]


class HubModelMissing(RuntimeError):
    """A hub entry that is not in the local cache and may not be downloaded here."""


def is_hub_source(spec: ModelSpec, models_dir: Path) -> bool:
    """True for an entry loaded from the hub rather than from a local folder."""
    if spec.source == "builtin" or "{models_dir}" in spec.source:
        return False
    source = spec.resolved_source(models_dir)
    if source.startswith(("/", ".", "~")) or Path(source).exists():
        return False
    return bool(_HUB_ID.match(source))


def pull_patterns(variant: str | None) -> tuple[list[str], list[str]]:
    """(allow, ignore) patterns: every component's configs and tokenizer files, and its
    safetensors weights of the entry's variant only (a root-level single-file checkpoint,
    which `from_pretrained` of a pipeline never reads, is left out)."""
    if variant:
        return [*_SUPPORT_FILES, f"*/*.{variant}.safetensors"], []
    return [*_SUPPORT_FILES, "*/*.safetensors"], list(_OTHER_VARIANTS)


def missing_message(spec: ModelSpec) -> str:
    """The one line a worker fails with when a hub entry has not been pulled."""
    at = f" at revision {spec.revision}" if spec.revision else ""
    return (
        f"model {spec.name!r}: {spec.source}{at} is not in the Hugging Face cache; "
        f"run `mediamesh models pull {spec.name}` first (or set allow_downloads: true "
        "on the worker)"
    )


def cached_snapshot(spec: ModelSpec, download: Downloader | None = None) -> Path | None:
    """The cached snapshot folder of a hub entry at its revision, or None if absent.

    Reads only the cache (refs/<branch> or snapshots/<commit>); never the network."""
    fetch = download or _snapshot_download()
    try:
        folder = fetch(spec.source, revision=spec.revision, local_files_only=True)
    except Exception:
        # The hub library signals a cache miss with several error types; all mean "absent".
        return None
    path = Path(folder)
    return path if (path / "model_index.json").is_file() else None


def pull(spec: ModelSpec, *, token: str | None, download: Downloader | None = None) -> Path:
    """Downloads a hub entry's files into the Hugging Face cache; returns the snapshot."""
    allow, ignore = pull_patterns(spec.variant)
    fetch = download or _snapshot_download()
    options: dict[str, Any] = {
        "revision": spec.revision,
        "allow_patterns": allow,
        "ignore_patterns": ignore or None,
        "token": token,
    }
    return Path(fetch(spec.source, **options))


def ensure_local(
    spec: ModelSpec,
    models_dir: Path,
    *,
    allow_downloads: bool,
    token: str | None = None,
    download: Downloader | None = None,
) -> Path | None:
    """The local snapshot of a hub entry, fetched first when downloads are allowed;
    None for entries that load from a local folder. Raises HubModelMissing."""
    if not is_hub_source(spec, models_dir):
        return None
    found = cached_snapshot(spec, download)
    if found is not None:
        return found
    if not allow_downloads:
        raise HubModelMissing(missing_message(spec))
    pull(spec, token=token, download=download)
    found = cached_snapshot(spec, download)
    if found is None:
        raise HubModelMissing(missing_message(spec))
    return found


def _snapshot_download() -> Downloader:
    from huggingface_hub import snapshot_download

    return snapshot_download
