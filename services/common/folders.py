"""Folders a service writes to, checked at start rather than at the first job."""

from __future__ import annotations

import os
from pathlib import Path

from mediamesh.common.errors import StartupError


def writable_folder(setting: str, path: Path) -> Path:
    """`path`, created if missing; a StartupError naming `setting` when it cannot be created
    or written. Without this, a scheduler or worker started on a read-only or mistyped path
    failed later with a bare FileNotFoundError or PermissionError, or at the first
    checkpoint, long after its supervisor reported it ready."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"{setting}: cannot create {path}: {exc.strerror or exc}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(f"{setting}: {path} is not writable by this process")
    return path
