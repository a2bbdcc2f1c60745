"""The run directory of a local `mediamesh up`, and how the local commands find it.

`mediamesh up` writes the config its children read (internal token included) to
`<run dir>/mesh.yaml`; `mediamesh status`, `top` and `drain` read that file when no
`--config` is given, so they carry the token of the mesh running from the same directory.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_RUN_DIR = Path(".mediamesh/run")
RUN_CONFIG_NAME = "mesh.yaml"


def run_config_path(run_dir: Path) -> Path:
    """Where `mediamesh up` writes the config of the mesh it runs from `run_dir`."""
    return run_dir / RUN_CONFIG_NAME


def local_config(config: Path | None, run_dir: Path) -> Path | None:
    """The config a local command reads: `config` when given (flag or MEDIAMESH_CONFIG),
    else the one a `mediamesh up` wrote to `run_dir`, else None (built-in defaults)."""
    if config is not None:
        return config
    recorded = run_config_path(run_dir)
    return recorded if recorded.is_file() else None


def write_private(path: Path, text: str) -> None:
    """Writes `text` to `path` readable by this user only: the file holds a secret.

    The file is created with mode 0600 under a temporary name and renamed over `path`, so
    the secret is never readable by others, even for a moment, and an older file with a
    wider mode is replaced rather than rewritten in place.
    """
    staging = path.with_name(f".{path.name}.tmp")
    staging.unlink(missing_ok=True)
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.replace(staging, path)
