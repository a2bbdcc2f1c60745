"""Reads of ended jobs the scheduler no longer holds in memory (see ended_jobs.py).

The scheduler keeps unfinished jobs and the most recently ended ones in memory; older ended
jobs are read back from here when a caller asks for them by id, by idempotency key, or in a
listing. Each function runs on the store's thread with its connection.

`EndKey` orders ended jobs by (finished_at, job_id). The scheduler drops ended jobs from
memory only once their end is stored, and remembers the largest key it dropped: every ended
row at or below it is one the scheduler no longer holds (or holds as well, read the same),
so a listing reads only those rows here and the rest from memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

# Listings run newest (or oldest) first within a tenant, or across tenants for an admin.
# Neither index names a column a state change writes, so neither is rewritten as jobs move.
LISTING_SCHEMA = """
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs (tenant, created_at, job_id);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at, job_id);
"""

EndKey = tuple[float, str]
OrderKey = tuple[float, str]


def by_key(db: sqlite3.Connection, tenant: str, idempotency_key: str) -> sqlite3.Row | None:
    """The tenant's job submitted under `idempotency_key`, if the store has it."""
    row: sqlite3.Row | None = db.execute(
        "SELECT * FROM jobs WHERE tenant = ? AND idempotency_key = ?", (tenant, idempotency_key)
    ).fetchone()
    return row


def unfinished(db: sqlite3.Connection) -> list[sqlite3.Row]:
    """Every job that has not ended, in acceptance order (the order they queue again in)."""
    return db.execute(
        "SELECT * FROM jobs WHERE finished_at IS NULL ORDER BY created_at, job_id"
    ).fetchall()


def newest_ended(
    db: sqlite3.Connection, since_finished: float, limit: int
) -> tuple[list[sqlite3.Row], EndKey | None]:
    """At most `limit` jobs ended at or after `since_finished`, the newest ones, oldest end
    first; and the end key of the newest one left out (None when none was)."""
    rows = db.execute(
        "SELECT * FROM jobs WHERE finished_at IS NOT NULL AND finished_at >= ? "
        "ORDER BY finished_at DESC, job_id DESC LIMIT ?",
        (since_finished, limit + 1),
    ).fetchall()
    left_out = (rows[limit]["finished_at"], rows[limit]["job_id"]) if len(rows) > limit else None
    return list(reversed(rows[:limit])), left_out


def ended_counts(db: sqlite3.Connection, up_to: EndKey) -> dict[str, int]:
    """Ended jobs by state, among those at or below the end key `up_to`."""
    rows = db.execute(
        "SELECT state, COUNT(*) AS n FROM jobs WHERE finished_at IS NOT NULL "
        "AND (finished_at, job_id) <= (?, ?) GROUP BY state",
        up_to,
    ).fetchall()
    return {r["state"]: r["n"] for r in rows}


def ended_page(
    db: sqlite3.Connection,
    *,
    up_to: EndKey,
    tenant: str | None,
    states: Collection[str],
    models: Collection[str],
    after: OrderKey | None,
    oldest_first: bool,
    limit: int,
) -> list[sqlite3.Row]:
    """Up to `limit` ended jobs at or below the end key `up_to`, of `tenant` (every tenant's
    when None), in listing order (created_at, job_id), newest first unless `oldest_first`,
    starting past the order key `after`; `states` and `models` filter when not empty."""
    where = ["finished_at IS NOT NULL", "(finished_at, job_id) <= (?, ?)"]
    args: list[object] = [*up_to]
    if tenant is not None:
        where.append("tenant = ?")
        args.append(tenant)
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(states)
    if models:
        where.append(f"model IN ({','.join('?' * len(models))})")
        args.extend(models)
    if after is not None:
        where.append(f"(created_at, job_id) {'>' if oldest_first else '<'} (?, ?)")
        args.extend(after)
    direction = "ASC" if oldest_first else "DESC"
    args.append(limit)
    return db.execute(
        f"SELECT * FROM jobs WHERE {' AND '.join(where)} "
        f"ORDER BY created_at {direction}, job_id {direction} LIMIT ?",
        args,
    ).fetchall()
