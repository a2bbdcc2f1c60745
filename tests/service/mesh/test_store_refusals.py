"""The scheduler refuses a job store it cannot safely take, in one line naming
scheduler.store_path, before it recovers anything from it: one another scheduler holds (it
would requeue that one's running jobs and send its webhooks), and one with a row it cannot
read back (skipping it would lose an accepted job without a word)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig, SchedulerSettings
from mediamesh.scheduler import main as scheduler_main
from mediamesh.scheduler.main import start_scheduler, store_lock_path
from mediamesh.scheduler.store.job_store import JobStore
from tests.unit.scheduler.test_unreadable_job_rows import cut_short, stored_job


def _config(tmp_path: Path) -> MeshConfig:
    settings = SchedulerSettings(
        port=0,
        metrics_port=None,
        store_path=tmp_path / "jobs.sqlite3",
        artifact_dir=tmp_path / "artifacts",
    )
    return MeshConfig(scheduler=settings, workers=[])


async def test_a_second_scheduler_on_a_held_store_is_refused_before_opening_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, registry = _config(tmp_path), load_registry()
    first = await start_scheduler(config, registry)
    opened: list[Path] = []

    class RecordingStore(JobStore):
        def __init__(self, path: Path) -> None:
            opened.append(path)
            super().__init__(path)

    monkeypatch.setattr(scheduler_main, "JobStore", RecordingStore)
    try:
        with pytest.raises(StartupError) as caught:
            await start_scheduler(config, registry)
        assert opened == []
        path = config.scheduler.store_path
        assert str(caught.value) == (
            f"scheduler.store_path: {path} is in use by another scheduler (pid {os.getpid()}, "
            f"holding {store_lock_path(path)}); stop that one first, or give this one another "
            "store_path"
        )
    finally:
        await first.stop(0)
    # Stopped, the first lets go: the next one starts (as `mediamesh up`'s restart does).
    second = await start_scheduler(config, registry)
    await second.stop(0)
    assert opened == [path]


async def test_a_row_it_cannot_read_stops_the_start_in_one_line_naming_the_job(
    tmp_path: Path,
) -> None:
    config, registry = _config(tmp_path), load_registry()
    path = config.scheduler.store_path
    job_id = await stored_job(path)
    with sqlite3.connect(path) as db:
        (params,) = db.execute("SELECT params FROM jobs").fetchone()
    db.close()
    cut_short(path, job_id, "params", 25)
    with pytest.raises(StartupError) as caught:
        await start_scheduler(config, registry)
    message = str(caught.value)
    assert message.startswith(f"scheduler.store_path: {path}: job {job_id} (state QUEUED) ")
    assert "column params is not valid JSON (" in message
    assert "\n" not in message
    # The refused start let go of the store: mended, it starts in this same process.
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET params = ?", (params,))
    db.close()
    scheduler = await start_scheduler(config, registry)
    try:
        assert job_id in scheduler.runtime.core.jobs
    finally:
        await scheduler.stop(0)
