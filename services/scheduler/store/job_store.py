"""Durable job store on SQLite (WAL): every accepted job and every transition is written.

All access goes through one dedicated thread, so writes land in the order they were
issued and the event loop never blocks on disk. A new job is inserted (and awaited) before
the core admits it; its later states are written in groups by `StoreWriter` (writer.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from mediamesh.scheduler.core.delivery import ResultDelivery
from mediamesh.scheduler.core.jobs import GenerationParams, Job, JobState, Priority, TenantQuota
from mediamesh.scheduler.store import deleted_jobs, deliveries, job_reads, result_rows
from mediamesh.scheduler.store.deliveries import WebhookDelivery
from mediamesh.scheduler.store.group_commit import GroupCommit

_Result = TypeVar("_Result")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL,
    params TEXT NOT NULL,
    quota TEXT NOT NULL,
    created_at REAL NOT NULL,
    deadline REAL,
    idempotency_key TEXT NOT NULL,
    cost_s REAL NOT NULL,
    attempts INTEGER NOT NULL,
    worker_losses INTEGER NOT NULL,
    step INTEGER NOT NULL,
    total_steps INTEGER NOT NULL,
    checkpoint TEXT,
    finished_at REAL,
    error_code TEXT NOT NULL,
    error_message TEXT NOT NULL,
    spot_fallback INTEGER NOT NULL,
    result TEXT,
    delivery TEXT NOT NULL DEFAULT '{}',
    trace_carrier TEXT NOT NULL DEFAULT '{}',
    worker_id TEXT NOT NULL DEFAULT '',
    batch_id TEXT NOT NULL DEFAULT '',
    pauses INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (state) WHERE finished_at IS NULL;
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency
    ON jobs (tenant, idempotency_key) WHERE idempotency_key != '';
"""

_COLUMNS = [
    "job_id",
    "tenant",
    "model",
    "queue",
    "priority",
    "state",
    "params",
    "quota",
    "created_at",
    "deadline",
    "idempotency_key",
    "cost_s",
    "attempts",
    "worker_losses",
    "step",
    "total_steps",
    "checkpoint",
    "finished_at",
    "error_code",
    "error_message",
    "spot_fallback",
    "result",
    "delivery",
    "trace_carrier",
    "worker_id",
    "batch_id",
    "pauses",
]

# What a state change rewrites. Params stay as inserted: the job in memory drops its inline
# inputs when it ends, and the row keeps them. The identity columns never change, and
# leaving them out means SQLite leaves the indexes over them alone at every transition.
_CHANGING_COLUMNS = [
    c
    for c in _COLUMNS
    if c
    not in (
        "job_id",
        "tenant",
        "model",
        "queue",
        "priority",
        "params",
        "created_at",
        "idempotency_key",
        "result",
    )
]

# Columns added after the first release, with their definitions, for databases made before.
_ADDED_COLUMNS = {
    "trace_carrier": "TEXT NOT NULL DEFAULT '{}'",
    "delivery": "TEXT NOT NULL DEFAULT '{}'",
    # Where the job ran last: an ended job read back answers as it did from memory.
    "worker_id": "TEXT NOT NULL DEFAULT ''",
    "batch_id": "TEXT NOT NULL DEFAULT ''",
    "pauses": "INTEGER NOT NULL DEFAULT 0",
}

# The store's format, kept in SQLite's `user_version`. Added columns and tables do not change
# it: a scheduler ignores what it does not know, so an upgrade can be rolled back. A change an
# older scheduler would misread raises it, so that such a scheduler refuses the file at start
# instead of rewriting what it cannot read.
SCHEMA_VERSION = 1


class NewerStoreError(sqlite3.DatabaseError):
    """The store was written in a format newer than this scheduler reads."""


class UnreadableJob(ValueError):
    """A stored job's row cannot be read back into a job (a column cut short, say); the
    message names the store, the job and what is wrong with the row."""


class PurgedJob(NamedTuple):
    """A job deleted from the store (its retention ended, or DeleteJob), and its result file
    if it had one."""

    job_id: str
    artifact_path: str | None
    # Backend objects a result kept in the store had been copied to (for a presigned URL).
    copies: tuple[str, ...] = ()
    state: str = ""
    result_bytes: int = 0
    tenant: str = ""


class DuplicateKey(Exception):
    """A new job's idempotency key already names a stored job of its tenant."""


StoredJob = tuple[Job, dict[str, Any] | None]


class LoadedJobs(NamedTuple):
    """What a restarting scheduler takes back from the store (see `JobStore.load`)."""

    unfinished: list[StoredJob]
    # The newest ended jobs within retention, oldest end first.
    ended: list[StoredJob]
    # The end key of the newest ended job left in the store alone, and how many such jobs
    # there are by state; None and empty when every one was loaded.
    left_out_up_to: job_reads.EndKey | None
    left_out_counts: dict[str, int]


# A job's params and quota never change but its row is written at every transition;
# converting them once per job took a few percent of the scheduler's time under load.
# Quotas are a few numbers, so a bounded cache by value serves every job of a tenant.
@functools.lru_cache(maxsize=4096)
def _quota_json(quota: TenantQuota) -> str:
    return json.dumps(asdict(quota))


# Params can carry inline input images (tens of KB each), so their cache must never be what
# keeps them alive: weak keys let an entry go with its params (an ended job's are replaced by
# a copy without the bytes), and an ended job's entry goes at its final write, after which
# a job held until retention is not written again.
_params_json: weakref.WeakKeyDictionary[GenerationParams, str] = weakref.WeakKeyDictionary()


def _params_json_of(job: Job) -> str:
    params = job.params
    if job.state.terminal:
        text = _params_json.pop(params, None)
        return text if text is not None else json.dumps(params.to_record())
    text = _params_json.get(params)
    if text is None:
        text = _params_json[params] = json.dumps(params.to_record())
    return text


def job_row(job: Job, result: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """A snapshot of the job's fields, taken on the event loop before the write is queued."""
    return (
        job.job_id,
        job.tenant,
        job.model,
        job.queue,
        int(job.priority),
        job.state.value,
        _params_json_of(job),
        _quota_json(job.quota),
        job.created_at,
        job.deadline,
        job.idempotency_key,
        job.cost_s,
        job.attempts,
        job.worker_losses,
        job.step,
        job.total_steps,
        job.checkpoint,
        job.finished_at,
        job.error_code,
        job.error_message,
        int(job.spot_fallback),
        json.dumps(result) if result is not None else None,
        json.dumps(job.delivery.to_record()),
        json.dumps(job.trace_carrier),
        job.worker_id or job.last_worker_id,
        job.batch_id or "",
        job.pauses,
    )


def job_from_row(row: sqlite3.Row) -> tuple[Job, dict[str, Any] | None]:
    state = JobState(row["state"])
    job = Job(
        job_id=row["job_id"],
        tenant=row["tenant"],
        model=row["model"],
        queue=row["queue"],
        priority=Priority(row["priority"]),
        params=GenerationParams.from_record(json.loads(row["params"])),
        created_at=row["created_at"],
        deadline=row["deadline"],
        idempotency_key=row["idempotency_key"],
        quota=TenantQuota(**json.loads(row["quota"])),
        state=state,
        cost_s=row["cost_s"],
        attempts=row["attempts"],
        worker_losses=row["worker_losses"],
        step=row["step"],
        total_steps=row["total_steps"],
        checkpoint=row["checkpoint"],
        finished_at=row["finished_at"],
        error_code=row["error_code"],
        error_message=row["error_message"],
        spot_fallback=bool(row["spot_fallback"]),
        trace_carrier=json.loads(row["trace_carrier"]),
        delivery=ResultDelivery.from_record(json.loads(row["delivery"])),
        # A job on a worker when the row was written still names it (a restart reads it
        # before queueing the job again); any other keeps it as where it last ran.
        worker_id=row["worker_id"] if state.in_flight and row["worker_id"] else None,
        last_worker_id=row["worker_id"],
        batch_id=row["batch_id"] or None,
        pauses=row["pauses"],
    )
    result = json.loads(row["result"]) if row["result"] else None
    return job, result


_JSON_COLUMNS = ("params", "quota", "result", "delivery", "trace_carrier")


def _row_fault(row: sqlite3.Row, error: Exception) -> str:
    """What is wrong with a row job_from_row refused: the first JSON column that does not
    parse, named, else the error itself."""
    for column in _JSON_COLUMNS:
        text = row[column]
        if not text and column == "result":
            continue
        try:
            json.loads(text)
        except (ValueError, TypeError) as exc:
            return f"column {column} is not valid JSON ({exc}; {len(text or '')} characters)"
    return f"{type(error).__name__}: {error}"


class JobStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-store")
        self._db: sqlite3.Connection | None = None
        try:
            self._executor.submit(self._open).result()
        except BaseException:
            self._executor.shutdown()
            raise
        # Listings scan (a filter that matches nothing walks every stored end: 27 ms at 200,000
        # jobs), so they read on a connection and thread of their own. In WAL mode a reader
        # never blocks the writer, and submits and ends do not wait behind a scan; a read
        # sees every transaction committed before it began, and a job leaves memory for the
        # store only once its end is committed (EndedJobs.stored).
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-store-reads")
        self._reader: sqlite3.Connection | None = None
        self._reads.submit(self._open_reader).result()
        # New jobs submitted while one is being written share the next commit.
        self._inserts: GroupCommit[tuple[Any, ...]] = GroupCommit(
            lambda rows: self._run(self._insert_group, rows)
        )

    def _open(self) -> None:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            db.close()
            raise NewerStoreError(
                f"the store has format {found}, written by a newer mediamesh; this scheduler "
                f"reads formats up to {SCHEMA_VERSION} (run the newer scheduler, or point "
                "scheduler.store_path at another file)"
            )
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL with WAL survives a process crash (SIGKILL); only power loss can drop the tail.
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        db.executescript(job_reads.LISTING_SCHEMA)
        db.execute(
            "CREATE TABLE IF NOT EXISTS store_probe (id INTEGER PRIMARY KEY, at REAL NOT NULL)"
        )
        db.executescript(deliveries.DELIVERIES_SCHEMA)
        db.executescript(result_rows.RESULTS_SCHEMA)
        db.executescript(deleted_jobs.DELETED_JOBS_SCHEMA)
        present = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
        for column, definition in _ADDED_COLUMNS.items():
            if column not in present:
                db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {definition}")
        if found < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._db = db

    def _open_reader(self) -> None:
        reader = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        reader.row_factory = sqlite3.Row
        reader.execute("PRAGMA query_only=ON")
        self._reader = reader

    async def _run(self, fn: Callable[..., _Result], *args: Any) -> _Result:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _insert(self, row: tuple[Any, ...]) -> None:
        assert self._db is not None
        placeholders = ",".join("?" * len(_COLUMNS))
        self._db.execute(f"INSERT INTO jobs ({','.join(_COLUMNS)}) VALUES ({placeholders})", row)

    def _insert_group(self, rows: list[tuple[Any, ...]]) -> list[BaseException | None]:
        """One transaction for the group; should it fail, each row alone, so that a bad
        row (a duplicate key) fails by itself and the others still go in."""
        assert self._db is not None
        placeholders = ",".join("?" * len(_COLUMNS))
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                f"INSERT INTO jobs ({','.join(_COLUMNS)}) VALUES ({placeholders})", rows
            )
        except sqlite3.Error:
            self._db.execute("ROLLBACK")
        else:
            self._db.execute("COMMIT")
            return [None] * len(rows)
        outcomes: list[BaseException | None] = []
        for row in rows:
            try:
                self._insert(row)
            except sqlite3.Error as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    def _probe(self) -> None:
        assert self._db is not None
        # A real committed write (the disk must take it), of one row that never grows.
        self._db.execute(
            "INSERT INTO store_probe (id, at) VALUES (1, ?) "
            "ON CONFLICT(id) DO UPDATE SET at = excluded.at",
            (time.time(),),
        )

    async def probe(self) -> None:
        """Write and commit one small row; raises when the store takes no writes. Tried
        while new jobs' inserts fail, since no Submit comes to try them once readiness
        reports the failure."""
        await self._run(self._probe)

    async def insert(self, job: Job) -> None:
        """Write a new job; returns once it is committed, raises if it could not be
        (DuplicateKey when its tenant's idempotency key names a stored job)."""
        try:
            await self._inserts.add(job_row(job))
        except sqlite3.IntegrityError as exc:
            if job.idempotency_key and "idempotency_key" in str(exc):
                raise DuplicateKey(str(exc)) from exc
            raise

    def _save_many(
        self,
        rows: list[tuple[Any, ...]],
        delivery_rows: list[tuple[Any, ...]],
        result_data: list[tuple[str, bytes]],
        deleted_job_ids: list[str],
    ) -> list[PurgedJob]:
        assert self._db is not None
        placeholders = ",".join("?" * len(_COLUMNS))
        updates = ",".join(f"{c}=excluded.{c}" for c in _CHANGING_COLUMNS)
        # One transaction for the group: one commit (one WAL sync) however many jobs moved.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                f"INSERT INTO jobs ({','.join(_COLUMNS)}) VALUES ({placeholders}) "
                f"ON CONFLICT(job_id) DO UPDATE SET {updates}, "
                "result=COALESCE(excluded.result, jobs.result)",
                rows,
            )
            deliveries.save_deliveries(self._db, delivery_rows)
            result_rows.save_results(self._db, result_data)
            # After the upserts: a job's last state written in this group is deleted with it,
            # and its place in listings is kept for a cursor naming it (deleted_jobs.py).
            deleted_jobs.remember(self._db, deleted_job_ids)
            deleted = (
                self._delete_where(
                    f"job_id IN ({','.join('?' * len(deleted_job_ids))})", deleted_job_ids
                )
                if deleted_job_ids
                else []
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return deleted

    async def save_many(
        self,
        rows: list[tuple[Any, ...]],
        delivery_rows: list[tuple[Any, ...]] | None = None,
        result_data: list[tuple[str, bytes]] | None = None,
        deleted_job_ids: list[str] | None = None,
    ) -> list[PurgedJob]:
        """Write jobs as snapshotted by `job_row`, webhook deliveries as snapshotted by
        `delivery_row` and results' bytes as (job id, bytes), then delete the jobs of
        `deleted_job_ids` with their results and deliveries, all or none; a row without a
        result keeps the stored one. Returns the deleted jobs that were in the store."""
        return await self._run(
            self._save_many, rows, delivery_rows or [], result_data or [], deleted_job_ids or []
        )

    def _with_db(self, fn: Callable[..., _Result], *args: Any) -> _Result:
        assert self._db is not None
        return fn(self._db, *args)

    async def read_result(self, job_id: str) -> bytes | None:
        """The bytes of a result kept in the store, or None."""
        return await self._run(self._with_db, result_rows.read_result, job_id)

    async def has_result(self, job_id: str) -> bool:
        """Whether the store keeps the job's result."""
        return await self._run(self._with_db, result_rows.has_result, job_id)

    async def result_copied_to(self, job_id: str) -> str | None:
        """The backend object a result kept here was copied to, if any."""
        return await self._run(self._with_db, result_rows.copied_to, job_id)

    async def set_result_copied_to(self, job_id: str, backend_path: str) -> None:
        """Record the backend object a result kept here was copied to."""
        await self._run(self._with_db, result_rows.set_copied_to, job_id, backend_path)

    async def delete_result(self, job_id: str) -> list[str]:
        """Delete a result kept in the store (a missing one is fine); returns the backend
        objects it had been copied to, for the caller to delete."""
        return await self._run(self._with_db, result_rows.delete_results, [job_id])

    async def load_deliveries(self) -> list[WebhookDelivery]:
        """Webhook deliveries still pending, to resume after a restart."""
        return await self._run(self._read_deliveries, deliveries.load_pending)

    async def deliveries_of(self, job_id: str) -> list[WebhookDelivery]:
        """Every webhook delivery of one job, whatever its status."""
        return await self._run(self._read_deliveries, deliveries.load_of_job, job_id)

    def _read_deliveries(
        self, read: Callable[..., list[WebhookDelivery]], *args: Any
    ) -> list[WebhookDelivery]:
        assert self._db is not None
        return read(self._db, *args)

    def _load(self, since_finished: float, ended_limit: int) -> LoadedJobs:
        assert self._db is not None
        unfinished = [self._loaded(r) for r in job_reads.unfinished(self._db)]
        ended, left_out = job_reads.newest_ended(self._db, since_finished, ended_limit)
        counts = job_reads.ended_counts(self._db, left_out) if left_out is not None else {}
        return LoadedJobs(unfinished, [self._loaded(r) for r in ended], left_out, counts)

    def _loaded(self, row: sqlite3.Row) -> StoredJob:
        """The job in `row`; UnreadableJob naming this store, the job and the fault when the
        row does not make one (a traceback from json would name neither)."""
        try:
            return job_from_row(row)
        except (ValueError, TypeError, KeyError) as exc:
            raise UnreadableJob(
                f"{self._path}: job {row['job_id']} (state {row['state']}) cannot be read "
                f"back: {_row_fault(row, exc)}; restore the store from a backup, or end or "
                "delete that row by hand"
            ) from exc

    async def load(self, since_finished: float, ended_limit: int) -> LoadedJobs:
        """Unfinished jobs, and the `ended_limit` newest of those that ended at or after
        `since_finished`."""
        return await self._run(self._load, since_finished, ended_limit)

    def _by_key(self, tenant: str, idempotency_key: str) -> StoredJob | None:
        assert self._db is not None
        row = job_reads.by_key(self._db, tenant, idempotency_key)
        return job_from_row(row) if row else None

    async def by_key(self, tenant: str, idempotency_key: str) -> StoredJob | None:
        """The tenant's stored job submitted under `idempotency_key`, if there is one."""
        return await self._run(self._by_key, tenant, idempotency_key)

    def _ended_page(self, **query: Any) -> list[StoredJob]:
        assert self._reader is not None
        return [job_from_row(r) for r in job_reads.ended_page(self._reader, **query)]

    async def ended_page(self, **query: Any) -> list[StoredJob]:
        """Ended jobs in listing order, read beside the writes; the arguments are
        `job_reads.ended_page`'s."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, functools.partial(self._ended_page, **query))

    def _get(self, job_id: str) -> tuple[Job, dict[str, Any] | None] | None:
        assert self._db is not None
        row = self._db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return job_from_row(row) if row else None

    async def get(self, job_id: str) -> StoredJob | None:
        """The stored job and its result record, if the store has the job."""
        return await self._run(self._get, job_id)

    async def deleted_place(self, job_id: str) -> tuple[str, float] | None:
        """The tenant and acceptance time of a job DeleteJob deleted, until its retention
        would have ended; None for any other id."""
        return await self._run(self._with_db, deleted_jobs.place_of, job_id)

    def _purge(self, finished_before: float) -> list[PurgedJob]:
        assert self._db is not None
        deleted_jobs.sweep(self._db, finished_before)
        return self._delete_where("finished_at IS NOT NULL AND finished_at < ?", (finished_before,))

    def _delete_where(self, condition: str, args: Sequence[Any]) -> list[PurgedJob]:
        """Delete the jobs `condition` selects with their kept results and webhook
        deliveries; the caller deletes the result files."""
        assert self._db is not None
        rows = self._db.execute(
            f"SELECT job_id, tenant, state, result FROM jobs WHERE {condition}", args
        ).fetchall()
        purged = []
        for row in rows:
            result = json.loads(row["result"]) if row["result"] else None
            purged.append(
                PurgedJob(
                    row["job_id"],
                    result["path"] if result else None,
                    tuple(result_rows.delete_results(self._db, [row["job_id"]])),
                    row["state"],
                    int(result.get("size_bytes", 0)) if result else 0,
                    row["tenant"],
                )
            )
        self._db.executemany("DELETE FROM jobs WHERE job_id = ?", [(p.job_id,) for p in purged])
        deliveries.delete_of_jobs(self._db, [p.job_id for p in purged])
        return purged

    async def purge(self, finished_before: float) -> list[PurgedJob]:
        """Delete jobs that ended before the cut-off, and what is kept of jobs deleted before
        their retention (deleted_jobs.py) whose retention would have ended; returns the jobs."""
        return await self._run(self._purge, finished_before)

    def _result_bytes_by_tenant(self) -> dict[str, int]:
        assert self._db is not None
        rows = self._db.execute(
            "SELECT tenant, SUM(json_extract(result, '$.size_bytes')) AS held FROM jobs "
            "WHERE result IS NOT NULL GROUP BY tenant"
        ).fetchall()
        return {r["tenant"]: int(r["held"] or 0) for r in rows}

    async def result_bytes_by_tenant(self) -> dict[str, int]:
        """Bytes of the stored results of each tenant's jobs."""
        return await self._run(self._result_bytes_by_tenant)

    def _counts(self) -> dict[str, int]:
        assert self._db is not None
        rows = self._db.execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state").fetchall()
        return {r["state"]: r["n"] for r in rows}

    async def counts(self) -> dict[str, int]:
        return await self._run(self._counts)

    async def close(self) -> None:
        def _close() -> None:
            if self._db is not None:
                self._db.close()

        def _close_reader() -> None:
            if self._reader is not None:
                self._reader.close()

        await asyncio.get_running_loop().run_in_executor(self._reads, _close_reader)
        self._reads.shutdown(wait=True)
        await self._run(_close)
        self._executor.shutdown(wait=True)
