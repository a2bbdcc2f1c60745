"""Small results in the job store: their bytes in a table of their own, keyed by job.

A table apart from `jobs` so that loading jobs at start-up never reads result bytes, and
rewriting a job's row at each transition never rewrites them. These functions run on the
store's thread, inside the transactions `JobStore` opens: a result commits with (or before)
the job state that announces it. `result_copies` names the backend object a result was
copied to when a presigned URL was wanted for it, so that deleting the result deletes that
too, restart or not; a table of its own, so that a copy can be recorded whether or not the
result's own row has been written yet.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

RESULTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS result_copies (
    job_id TEXT PRIMARY KEY,
    backend_path TEXT NOT NULL
);
"""


def save_results(db: sqlite3.Connection, rows: Iterable[tuple[str, bytes]]) -> None:
    """Insert or replace (job id, bytes) rows: an attempt's result replaces an earlier one's."""
    db.executemany("INSERT OR REPLACE INTO results (job_id, data) VALUES (?, ?)", rows)


def read_result(db: sqlite3.Connection, job_id: str) -> bytes | None:
    row = db.execute("SELECT data FROM results WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else bytes(row[0])


def has_result(db: sqlite3.Connection, job_id: str) -> bool:
    return db.execute("SELECT 1 FROM results WHERE job_id = ?", (job_id,)).fetchone() is not None


def copied_to(db: sqlite3.Connection, job_id: str) -> str | None:
    row = db.execute(
        "SELECT backend_path FROM result_copies WHERE job_id = ?", (job_id,)
    ).fetchone()
    return None if row is None else row[0]


def set_copied_to(db: sqlite3.Connection, job_id: str, backend_path: str) -> None:
    db.execute(
        "INSERT OR REPLACE INTO result_copies (job_id, backend_path) VALUES (?, ?)",
        (job_id, backend_path),
    )


def delete_results(db: sqlite3.Connection, job_ids: list[str]) -> list[str]:
    """Delete the rows; returns the backend objects they had been copied to."""
    copies: list[str] = []
    for job_id in job_ids:
        if (path := copied_to(db, job_id)) is not None:
            copies.append(path)
    keys = [(j,) for j in job_ids]
    db.executemany("DELETE FROM results WHERE job_id = ?", keys)
    db.executemany("DELETE FROM result_copies WHERE job_id = ?", keys)
    return copies
