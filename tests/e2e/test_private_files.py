"""What a mesh writes holds prompts and generations: its files and folders are its user's
alone, whatever the umask `mediamesh up` was started with."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_the_job_store_results_and_logs_are_private(launch, tmp_path: Path) -> None:
    previous = os.umask(0o022)  # a common default, under which files are world-readable
    try:
        mesh = launch([{"models": ["echo"]}])
    finally:
        os.umask(previous)
    result = mesh.cli(
        "generate", "--gateway", mesh.gateway, "--model", "echo", "--prompt", "a secret",
        "--quiet", "--out", str(tmp_path / "out.png"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = [
        path
        for folder in (tmp_path / "state", tmp_path / "artifacts", mesh.run_dir)
        for path in (folder, *folder.rglob("*"))
    ]
    assert any(path.name.endswith(".sqlite3") for path in written)
    assert {"gateway.log", "scheduler.log", "mesh.yaml", "uploads"} <= {p.name for p in written}
    shared = [
        f"{path} {stat.filemode(path.stat().st_mode)}"
        for path in written
        if path.stat().st_mode & 0o077
    ]
    assert not shared
