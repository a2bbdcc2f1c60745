"""A scheduler or worker whose folders cannot be used refuses to start, naming the setting.

A store path under a folder that cannot be created ended the scheduler with a bare
FileNotFoundError from pathlib; a worker's checkpoint folder was found unusable only at its
first checkpoint, long after it reported ready.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.errors import StartupError
from mediamesh.common.folders import writable_folder
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig, SchedulerSettings, WorkerSettings
from mediamesh.scheduler.main import start_scheduler
from mediamesh.worker.main import load_hosts

# /proc takes no new folders, not even from root (the tests may run as root, whom
# permission bits do not stop).
UNCREATABLE = Path("/proc/mediamesh-test/state")


def test_a_folder_that_cannot_be_created_names_its_setting():
    with pytest.raises(StartupError) as caught:
        writable_folder("worker.checkpoint_dir", UNCREATABLE)
    assert str(caught.value).startswith(f"worker.checkpoint_dir: cannot create {UNCREATABLE}: ")


def test_a_folder_is_created_when_missing(tmp_path: Path):
    assert writable_folder("x", tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize(
    ("setting", "value"),
    [("store_path", UNCREATABLE / "jobs.sqlite3"), ("artifact_dir", UNCREATABLE)],
)
async def test_the_scheduler_names_an_unusable_path(tmp_path: Path, setting: str, value: Path):
    paths = {"store_path": tmp_path / "jobs.sqlite3", "artifact_dir": tmp_path / "artifacts"}
    paths[setting] = value
    config = MeshConfig(scheduler=SchedulerSettings(port=0, metrics_port=None, **paths))
    with pytest.raises(StartupError) as caught:
        await start_scheduler(config, load_registry(None))
    assert str(caught.value).startswith(f"scheduler.{setting}: ")
    assert str(UNCREATABLE) in str(caught.value)


def test_the_worker_names_an_unusable_checkpoint_folder(models_dir: Path):
    config = MeshConfig(models_dir=models_dir)
    worker = WorkerSettings(worker_id="w", checkpoint_dir=UNCREATABLE, models=["echo"])
    registry = load_registry(None)
    with pytest.raises(StartupError) as caught:
        load_hosts(config, worker, [s for s in registry.models if s.name == "echo"])
    assert str(caught.value).startswith("worker.checkpoint_dir: cannot create ")
