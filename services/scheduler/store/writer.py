"""Writes jobs' state changes to the store in the background, in groups, until they land.

A state change must not wait for the disk (the core's effects are applied synchronously),
but it must not be lost either: each job's latest state waits here until a write of it
commits. A failed write is logged, counted in `mediamesh_store_write_failures_total` and
tried again after a backoff that doubles up to a bound. Only the newest state of a job is
written, so a job's writes can never land out of order, and everything that changed while
one write was in flight goes in the next, as one transaction. Should that transaction fail,
each job's part of it is written alone, so that one row the store cannot take (a large
result on a full disk) holds back only its own job: the others, whose ends watchers may
already have been told, land and do not come back unfinished after a restart.

Webhook deliveries (store/deliveries.py) travel the same way: a delivery saved together
with the job state it announces lands in the same transaction, so a restart never finds a
job ended without the delivery that was to tell of it. Results kept in the store
(in_store_results.py) do too: a result queued before the state that announces it lands in
the same transaction or an earlier one, so a restart never finds a job succeeded without
its bytes.

A job deleted before its retention (DeleteJob) is deleted by the same path, after every
write of it: a delete that went straight to the store could land before a write of the
job's end still in flight here, which would then write the job back.

A job's input files are removed once its end has landed (`EndedInputs`, input_files.py), and
never before: were they removed first, a crash in between would restart the job without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mediamesh.scheduler import metrics
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.input_files import EndedInputs
from mediamesh.scheduler.store.deliveries import WebhookDelivery, delivery_row
from mediamesh.scheduler.store.health import TRANSITIONS, StoreHealth
from mediamesh.scheduler.store.job_store import JobStore, PurgedJob, job_row

log = logging.getLogger("mediamesh.scheduler.store")

# How long a write of nothing but jobs moving onto a worker (dispatched, running) may wait
# for more: a restart queues those jobs again whatever they were, so their states need not
# land on their own. At one job at a time each job took four commits (accepted, dispatched,
# running, ended); its end, due within this time for a short job, now takes the two middle
# ones along.
IN_FLIGHT_WRITE_DELAY_S = 0.05


class StoreWriter:
    """The one path by which jobs already in the store are written again."""

    def __init__(
        self,
        store: JobStore,
        *,
        first_backoff_s: float = 0.05,
        max_backoff_s: float = 5.0,
        health: StoreHealth | None = None,
        ended_inputs: EndedInputs | None = None,
        on_ends_stored: Callable[[list[Job]], None] | None = None,
    ) -> None:
        self._store = store
        # Told of the jobs whose end each write landed (they may now leave memory).
        self._on_ends_stored = on_ends_stored
        # Told of the jobs whose end each write landed: it removes their input files.
        self._ended_inputs = ended_inputs or EndedInputs()
        # Told of every write's outcome: state changes that do not land turn readiness off.
        self._health = health or StoreHealth()
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        # Job id -> (the job, its result if one is still to be written).
        self._pending: dict[str, tuple[Job, dict[str, Any] | None]] = {}
        # Delivery id -> the delivery's latest state.
        self._deliveries: dict[str, WebhookDelivery] = {}
        # Job id -> result bytes to keep in the store.
        self._results: dict[str, bytes] = {}
        # Job id -> what its deletion answers: the job as the store held it, None if absent.
        self._deletes: dict[str, asyncio.Future[PurgedJob | None]] = {}
        self._wake = asyncio.Event()
        # Set by anything that should be written without the delay above.
        self._due = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start writing in the background."""
        self._task = asyncio.create_task(self._run(), name="store-writer")

    @property
    def pending(self) -> int:
        """Jobs whose latest state is not yet in the store."""
        return len(self._pending)

    def save_delivery(self, delivery: WebhookDelivery) -> None:
        """Have the webhook delivery's state written soon, with the jobs saved meanwhile."""
        self._deliveries[delivery.delivery_id] = delivery
        self._idle.clear()
        self._wake.set()
        self._due.set()

    def save_result(self, job_id: str, data: bytes) -> None:
        """Have the job's result bytes written soon, before or with its next state."""
        self._results[job_id] = data
        self._idle.clear()
        self._wake.set()
        self._due.set()

    def unsaved_result(self, job_id: str) -> bytes | None:
        """Result bytes queued and not yet handed to the store (None otherwise)."""
        return self._results.get(job_id)

    def forget_result(self, job_id: str) -> None:
        """Drop result bytes not yet handed to the store (a result no longer wanted)."""
        self._results.pop(job_id, None)

    def delete(self, job_id: str) -> asyncio.Future[PurgedJob | None]:
        """Have the job deleted from the store (its row, kept result and webhook deliveries)
        after every write of it queued so far; the future answers with what was deleted
        once that has landed, None for a job the store did not hold."""
        self._results.pop(job_id, None)
        for delivery_id in [d.delivery_id for d in self._deliveries.values() if d.job_id == job_id]:
            del self._deliveries[delivery_id]
        deleted = self._deletes.get(job_id)
        if deleted is None:
            deleted = asyncio.get_running_loop().create_future()
            self._deletes[job_id] = deleted
        self._idle.clear()
        self._wake.set()
        self._due.set()
        return deleted

    def save(
        self, job: Job, result: dict[str, Any] | None = None, *, may_wait: bool = False
    ) -> None:
        """Have the job's state written soon; `result` (its artifact) is written with it.
        `may_wait`: the write may wait IN_FLIGHT_WRITE_DELAY_S for more to go with it."""
        earlier = self._pending.get(job.job_id)
        if result is None and earlier is not None:
            result = earlier[1]
        self._pending[job.job_id] = (job, result)
        metrics.STORE_PENDING_WRITES.set(len(self._pending))
        self._idle.clear()
        self._wake.set()
        if not may_wait:
            self._due.set()

    async def _run(self) -> None:
        backoff = self._first_backoff_s
        while True:
            if not (self._pending or self._deliveries or self._results or self._deletes):
                self._idle.set()
                await self._wake.wait()
            if not self._due.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IN_FLIGHT_WRITE_DELAY_S):
                        await self._due.wait()
            self._wake.clear()
            self._due.clear()
            writes = _Writes.taken(self._pending, self._deliveries, self._results, self._deletes)
            self._pending, self._deliveries, self._results, self._deletes = {}, {}, {}, {}
            landed, held_back, error = await self._write(writes)
            # Back before anything is awaited: a deletion meanwhile must find them queued.
            for part in held_back:
                self._put_back(part)
            for part, deleted in landed:
                await self._landed(part, deleted)
            if held_back:
                metrics.STORE_WRITE_FAILURES.labels("transition").inc()
                self._health.failed(TRANSITIONS)
                log.warning(
                    "writing %d of %d job states to the store failed (%s); retrying in %.2f s",
                    sum(len(part.jobs) for part in held_back),
                    len(writes.jobs),
                    error,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            backoff = self._first_backoff_s
            self._health.succeeded(TRANSITIONS)
            metrics.STORE_PENDING_WRITES.set(len(self._pending))

    async def _write(
        self, writes: _Writes
    ) -> tuple[list[tuple[_Writes, list[PurgedJob]]], list[_Writes], Exception | None]:
        """Write `writes` in one transaction; should it fail, each job's part in one of its
        own, so that a row the store cannot take (a large result on a full disk) holds back
        only its own job, not others whose end was already announced. Returns the parts
        that landed with the jobs they deleted, the parts held back, and the last error."""
        try:
            return [(writes, await self._store.save_many(*writes.snapshot()))], [], None
        except Exception as exc:
            parts = writes.by_job()
            if len(parts) <= 1:
                return [], [writes], exc
            error = exc
        landed: list[tuple[_Writes, list[PurgedJob]]] = []
        held_back: list[_Writes] = []
        for part in parts:
            try:
                landed.append((part, await self._store.save_many(*part.snapshot())))
            except Exception as exc:
                held_back.append(part)
                error = exc
        return landed, held_back, error

    async def _landed(self, writes: _Writes, deleted: list[PurgedJob]) -> None:
        """Tell whoever waits on these writes that they are in the store."""
        ended = writes.ended
        if ended and self._on_ends_stored is not None:
            try:
                self._on_ends_stored(ended)
            except Exception:
                log.exception("noting the stored ends of %d jobs failed", len(ended))
        found = {job.job_id: job for job in deleted}
        for job_id, answer in writes.deletes.items():
            if not answer.done():
                answer.set_result(found.get(job_id))
        if ended:
            try:
                await self._ended_inputs.ended(ended)
            except Exception:
                log.exception("removing the inputs of %d ended jobs failed", len(ended))

    def _put_back(self, writes: _Writes) -> None:
        """Queue writes that did not land again; anything saved since keeps its newer entry."""
        self._requeue(writes.jobs)
        for delivery_id, delivery in writes.hooks.items():
            self._deliveries.setdefault(delivery_id, delivery)
        for job_id, data in writes.results.items():
            self._results.setdefault(job_id, data)
        for job_id, answer in writes.deletes.items():
            self._deletes.setdefault(job_id, answer)

    def _requeue(self, group: dict[str, tuple[Job, dict[str, Any] | None]]) -> None:
        """Put a failed group back; a job saved again meanwhile keeps its newer entry, and
        the result the failed write carried."""
        for job_id, (job, result) in group.items():
            newer = self._pending.get(job_id)
            if newer is None:
                self._pending[job_id] = (job, result)
            elif newer[1] is None and result is not None:
                self._pending[job_id] = (newer[0], result)
        metrics.STORE_PENDING_WRITES.set(len(self._pending))

    async def flush(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until every state saved so far is in the store."""
        # asyncio.timeout: wait_for on Python 3.11 can drop a cancellation that lands as
        # the writer goes idle (see common/aio.py).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        return self._idle.is_set()

    async def close(self, timeout_s: float) -> None:
        """Write what is pending (for at most `timeout_s`), then stop."""
        if self._task is not None and not await self.flush(timeout_s):
            log.error(
                "the job store took no writes for %.1f s; the latest state of %d jobs is lost "
                "(they restart from their last stored state)",
                timeout_s,
                len(self._pending),
            )
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._ended_inputs.close()


@dataclass
class _Writes:
    """What one pass writes: jobs' states (with results), webhook deliveries, results'
    bytes and deletions, with the rows snapshotted when they were taken (`taken`)."""

    jobs: dict[str, tuple[Job, dict[str, Any] | None]] = field(default_factory=dict)
    hooks: dict[str, WebhookDelivery] = field(default_factory=dict)
    results: dict[str, bytes] = field(default_factory=dict)
    deletes: dict[str, asyncio.Future[PurgedJob | None]] = field(default_factory=dict)
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    hook_rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # The jobs whose rows hold a terminal state: what landing them tells `on_ends_stored`.
    ended: list[Job] = field(default_factory=list)

    @classmethod
    def taken(
        cls,
        jobs: dict[str, tuple[Job, dict[str, Any] | None]],
        hooks: dict[str, WebhookDelivery],
        results: dict[str, bytes],
        deletes: dict[str, asyncio.Future[PurgedJob | None]],
    ) -> _Writes:
        """The writes, their rows snapshotted now, on the loop: the jobs keep changing
        while a write of them runs."""
        rows = {job_id: job_row(job, result) for job_id, (job, result) in jobs.items()}
        hook_rows = {delivery_id: delivery_row(d) for delivery_id, d in hooks.items()}
        ended = [job for job, _ in jobs.values() if job.state.terminal]
        return cls(jobs, hooks, results, deletes, rows, hook_rows, ended)

    def snapshot(
        self,
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[str, bytes]], list[str]]:
        """The arguments of `JobStore.save_many` that write all of it in one transaction."""
        return (
            list(self.rows.values()),
            list(self.hook_rows.values()),
            list(self.results.items()),
            list(self.deletes),
        )

    def by_job(self) -> list[_Writes]:
        """The same writes, one part per job: a job's state, the deliveries announcing it
        and its result's bytes stay together, so a part that lands keeps their promises."""
        parts: dict[str, _Writes] = {}
        for job_id, entry in self.jobs.items():
            part = parts.setdefault(job_id, _Writes())
            part.jobs[job_id], part.rows[job_id] = entry, self.rows[job_id]
        for job in self.ended:
            parts[job.job_id].ended.append(job)
        for delivery_id, delivery in self.hooks.items():
            part = parts.setdefault(delivery.job_id, _Writes())
            part.hooks[delivery_id] = delivery
            part.hook_rows[delivery_id] = self.hook_rows[delivery_id]
        for job_id, data in self.results.items():
            parts.setdefault(job_id, _Writes()).results[job_id] = data
        for job_id, answer in self.deletes.items():
            parts.setdefault(job_id, _Writes()).deletes[job_id] = answer
        return list(parts.values())
