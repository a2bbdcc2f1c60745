"""Webhook deliveries in the job store: one row per event to deliver, until it is delivered
or given up, so a restarted scheduler resumes the ones still pending.

These functions run on the store's own thread, inside the transactions `JobStore` opens:
a job's final state and the delivery announcing it commit together.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from enum import StrEnum
from typing import Any

DELIVERIES_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    delivery_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    url TEXT NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at REAL NOT NULL,
    status TEXT NOT NULL,
    last_error TEXT NOT NULL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending
    ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_job ON webhook_deliveries (job_id);
"""


class DeliveryStatus(StrEnum):
    """Where a delivery is: still to be made, made (a 2xx answer), or given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass
class WebhookDelivery:
    """One event for one webhook, and how its attempts went."""

    delivery_id: str
    job_id: str
    tenant: str
    url: str
    # "completed", "failed" or "progress".
    event: str
    # The JSON body as recorded; fresh fields (a result URL) are added at each attempt.
    payload: str
    created_at: float
    attempts: int = 0
    next_attempt_at: float = 0.0
    status: DeliveryStatus = DeliveryStatus.PENDING
    last_error: str = ""
    finished_at: float | None = None


_COLUMNS = [f.name for f in fields(WebhookDelivery)]


def delivery_row(delivery: WebhookDelivery) -> tuple[Any, ...]:
    """A snapshot of the delivery, taken on the event loop before its write is queued."""
    row = astuple(delivery)
    status_index = _COLUMNS.index("status")
    return (*row[:status_index], str(delivery.status), *row[status_index + 1 :])


def save_deliveries(db: sqlite3.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Insert or update deliveries (inside the caller's transaction)."""
    placeholders = ",".join("?" * len(_COLUMNS))
    updates = ",".join(f"{c}=excluded.{c}" for c in _COLUMNS[1:])
    db.executemany(
        f"INSERT INTO webhook_deliveries ({','.join(_COLUMNS)}) VALUES ({placeholders}) "
        f"ON CONFLICT(delivery_id) DO UPDATE SET {updates}",
        list(rows),
    )


def load_pending(db: sqlite3.Connection) -> list[WebhookDelivery]:
    """Every delivery still to be made, oldest first."""
    rows = db.execute(
        f"SELECT {','.join(_COLUMNS)} FROM webhook_deliveries WHERE status = ? ORDER BY created_at",
        (str(DeliveryStatus.PENDING),),
    ).fetchall()
    return [_from_row(tuple(row)) for row in rows]


def load_of_job(db: sqlite3.Connection, job_id: str) -> list[WebhookDelivery]:
    """Every delivery of one job, oldest first (operators' and tests' view)."""
    rows = db.execute(
        f"SELECT {','.join(_COLUMNS)} FROM webhook_deliveries WHERE job_id = ? ORDER BY created_at",
        (job_id,),
    ).fetchall()
    return [_from_row(tuple(row)) for row in rows]


def delete_of_jobs(db: sqlite3.Connection, job_ids: list[str]) -> None:
    """Forget the deliveries of deleted jobs (their retention ended, or DeleteJob)."""
    db.executemany("DELETE FROM webhook_deliveries WHERE job_id = ?", [(j,) for j in job_ids])


def _from_row(row: tuple[Any, ...]) -> WebhookDelivery:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["status"] = DeliveryStatus(values["status"])
    return WebhookDelivery(**values)
