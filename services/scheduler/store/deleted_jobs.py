"""Where jobs deleted before their retention (DeleteJob) stood in job listings.

A listing continues after the job id the previous page ended with (`after_job_id`), and
`mediamesh batch --delete-results` deletes jobs as fast as they end, so a caller paging
through its jobs routinely finds the cursor's job gone. A deleted job leaves a small row
here (id, tenant, acceptance time: its place in every listing) so that the next page still
starts where it stood, for its own tenant only.

Why rows in the store, rather than tombstones in memory or a cursor that carries its
position: the cursor is the job id every client already sends (the SDK's `last_id`, the
CLI's `--after`, HTTP's `after`), and job ids are random, so a position cursor would change
the API on every transport. Tombstones in memory would grow with the rate of deletes (a
day's retention at 100 deleted jobs a second is 8.6 million) and be lost at a restart. A
row here costs no memory, is written in the transaction that deletes the job (no moment
when the cursor names nothing), outlives restarts, is read only when a cursor names no
job, and is swept with the purge at the end of the retention the job would have had.

These functions run on the store's thread, inside the transactions `JobStore` opens.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

DELETED_JOBS_SCHEMA = """
CREATE TABLE IF NOT EXISTS deleted_jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS deleted_jobs_finished ON deleted_jobs (finished_at);
"""


def remember(db: sqlite3.Connection, job_ids: Sequence[str]) -> None:
    """Keep the listing place of the jobs about to be deleted (call before deleting them)."""
    if not job_ids:
        return
    db.execute(
        "INSERT OR REPLACE INTO deleted_jobs (job_id, tenant, created_at, finished_at) "
        "SELECT job_id, tenant, created_at, COALESCE(finished_at, created_at) FROM jobs "
        f"WHERE job_id IN ({','.join('?' * len(job_ids))})",
        job_ids,
    )


def place_of(db: sqlite3.Connection, job_id: str) -> tuple[str, float] | None:
    """The deleted job's tenant and acceptance time, while its retention would last."""
    row = db.execute(
        "SELECT tenant, created_at FROM deleted_jobs WHERE job_id = ?", (job_id,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def sweep(db: sqlite3.Connection, finished_before: float) -> None:
    """Forget the deleted jobs whose retention would have ended before the cut-off."""
    db.execute("DELETE FROM deleted_jobs WHERE finished_at < ?", (finished_before,))
