"""The run directory of a local `mediamesh up`, and how the local commands find it.

`mediamesh up` writes the config its children read (internal token included) to
`<run dir>/mesh.yaml`; `mediamesh status`, `top` and `drain` read that file when no
`--config` is given, so they carry the token of the mesh running from the same directory.
While it runs, `up` holds `<run dir>/up.lock`: a second `up` there would rewrite that file
with a token of its own, which the running mesh's restarted children would then read.
"""

from __future__ import annotations

import os
from pathlib import Path

from mediamesh.common.errors import StartupError
from mediamesh.common.exclusive_lock import ExclusiveLock, LockHeld

DEFAULT_RUN_DIR = Path(".mediamesh/run")
RUN_CONFIG_NAME = "mesh.yaml"
RUN_LOCK_NAME = "up.lock"


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


def hold_run_dir(run_dir: Path) -> ExclusiveLock:
    """`run_dir`, created if missing, locked for this `mediamesh up` until released (or the
    process ends); a StartupError naming `--run-dir` and the holder's pid while another
    `up` runs from it. Nothing in the folder is written before the lock is had."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        return ExclusiveLock.take(run_dir / RUN_LOCK_NAME)
    except LockHeld as held:
        raise StartupError(
            f"--run-dir: {run_dir} is in use by another `mediamesh up` ({held.holder}, "
            f"holding {held.path}); stop that one first, or give another --run-dir"
        ) from held
    except OSError as exc:
        raise StartupError(f"--run-dir: cannot use {run_dir}: {exc}") from exc
