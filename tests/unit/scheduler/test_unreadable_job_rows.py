"""A stored job whose row does not read back (a column cut short) is named, with its store
and what is wrong, rather than raised as a bare JSON error from deep in the load."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.store.job_store import JobStore, UnreadableJob

from .fakes import FakeClock, make_core, new_job


async def stored_job(path: Path) -> str:
    """A queued job written to a new store at `path`; its id."""
    store = JobStore(path)
    try:
        outcome = make_core(FakeClock()).prepare(new_job())
        assert isinstance(outcome, Accepted)
        await store.insert(outcome.job)
        return outcome.job.job_id
    finally:
        await store.close()


def cut_short(path: Path, job_id: str, column: str, length: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            f"UPDATE jobs SET {column} = substr({column}, 1, ?) WHERE job_id = ?", (length, job_id)
        )
    db.close()


@pytest.mark.parametrize("column", ["params", "delivery"])
async def test_a_row_cut_short_names_the_store_the_job_and_the_column(
    tmp_path: Path, column: str
) -> None:
    path = tmp_path / "jobs.sqlite3"
    job_id = await stored_job(path)
    cut_short(path, job_id, column, 5)
    store = JobStore(path)
    try:
        with pytest.raises(UnreadableJob) as caught:
            await store.load(0.0, 100)
    finally:
        await store.close()
    message = str(caught.value)
    assert message.startswith(f"{path}: job {job_id} (state QUEUED) cannot be read back: ")
    assert f"column {column} is not valid JSON" in message
    assert "\n" not in message
