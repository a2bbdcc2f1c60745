"""Taking new jobs: each is in the job store before the core queues it.

Before, a job entered the core first and its row was written after; with a failing store the
caller heard INTERNAL while the job ran anyway, unrecorded, and a retry with the same
idempotency key found that phantom. Now the core checks and builds the job (`prepare`), the
store commits it, and only then does the core queue it (`admit`): a store that fails answers
UNAVAILABLE and nothing runs (`release` gives its place back).

While a job is being written other submits are checked, so the core counts the jobs between
`prepare` and `admit` against the queue's `max_depth` and the tenant's queued limit; without
that, concurrent submits all passed the same check (31 queued with a max_depth of 30).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from mediamesh.common.errors import MeshError, StatusCode, Unavailable
from mediamesh.scheduler import metrics
from mediamesh.scheduler.core.effects import Effect
from mediamesh.scheduler.core.idempotency import conflict_message, conflicting_field
from mediamesh.scheduler.core.interface import (
    RESULT_QUOTA,
    STORE_UNAVAILABLE,
    Accepted,
    NewJob,
    SchedulingCore,
)
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.result_usage import ResultUsage
from mediamesh.scheduler.store.health import INSERTS, StoreHealth
from mediamesh.scheduler.store.job_store import DuplicateKey, JobStore

log = logging.getLogger("mediamesh.scheduler")

_Key = tuple[str, str]


class Refused(MeshError):
    """A new job not taken; `reason` (one of REFUSAL_REASONS) names
    the check that refused it, for the refusals metric and log."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        code: StatusCode | None = None,
        retry_after_s: float = 0,
    ) -> None:
        super().__init__(message, code=code, retry_after_s=retry_after_s)
        self.reason = reason


class StoreUnavailable(Unavailable, Refused):
    """The job store failed to take the job: UNAVAILABLE, worth a retry."""


def _same_request(earlier: Job, new: NewJob) -> Job:
    """`earlier`, the job `new`'s idempotency key names, when `new` repeats its request;
    refused INVALID_ARGUMENT, naming the field, when it asks for another."""
    if differing := conflicting_field(earlier, new):
        raise Refused(
            conflict_message(earlier, differing),
            code=StatusCode.INVALID_ARGUMENT,
            reason="idempotency_conflict",
        )
    return earlier


class Submissions:
    """New jobs on their way into the store and then the core."""

    def __init__(
        self,
        core: SchedulingCore,
        store: JobStore,
        apply: Callable[[list[Effect]], None],
        health: StoreHealth | None = None,
        result_usage: ResultUsage | None = None,
        ended_outside_memory: Callable[[], bool] = lambda: True,
    ) -> None:
        self._core = core
        # Whether any ended job is in the store only (EndedJobs.dropped_up_to): until one
        # is, a refused retry has no earlier job to find there, and the store's one thread
        # is spared a read per refusal (an overloaded mesh refuses many).
        self._ended_outside_memory = ended_outside_memory
        # Each tenant's stored result bytes, against the quota its submits carry.
        self._result_usage = result_usage
        # Told of every insert's outcome: a store refusing them turns the health NOT_SERVING.
        self._health = health or StoreHealth()
        self._store = store
        self._apply = apply
        # Jobs being written, by (tenant, idempotency key): a second submit with the key
        # waits for the first instead of racing it to the store's unique index.
        self._writing: dict[_Key, asyncio.Future[Job]] = {}

    async def submit(self, new: NewJob, result_quota_bytes: int = 0) -> tuple[Job, bool]:
        """Accept a job: returns it and whether it is an earlier one with the same key.
        `result_quota_bytes`: the tenant's quota of stored results (0: none)."""
        key = (new.tenant, new.idempotency_key)
        while new.idempotency_key:
            earlier = self._writing.get(key)
            if earlier is None or earlier.done():
                break
            try:
                job = await asyncio.shield(earlier)
            except Exception:
                continue  # its write failed: this one tries
            return _same_request(job, new), True
        outcome = self._core.prepare(new)
        if not isinstance(outcome, Accepted):
            # The core finds a retry's earlier job only in memory, before any check; one that
            # ended and left memory is in the store, and a retry of it is answered with it
            # whatever a new job would meet now (a full queue, a quota, a short deadline).
            if (stored := await self._ended_under_key(new)) is not None:
                return stored, True
            raise Refused(
                outcome.message,
                code=outcome.code,
                retry_after_s=outcome.retry_after_s,
                reason=outcome.reason,
            )
        if outcome.deduplicated:
            return outcome.job, True
        usage = self._result_usage
        if usage is not None and usage.over_quota(new.tenant, result_quota_bytes):
            self._core.release(outcome.job)
            # A retry of a job that ended and left memory is still answered with it.
            if (stored := await self._ended_under_key(new)) is not None:
                return stored, True
            raise Refused(
                f"result_quota_bytes: tenant {new.tenant!r} holds {usage.held(new.tenant)} "
                f"bytes of results, at or over its quota of {result_quota_bytes}; delete "
                "results it no longer needs (DeleteJob, DELETE /v1/jobs/{job_id}/record) or "
                "wait for their retention",
                code=StatusCode.RESOURCE_EXHAUSTED,
                reason=RESULT_QUOTA,
            )
        writing = asyncio.ensure_future(self._persist_and_admit(outcome.job))
        writing.add_done_callback(functools.partial(self._written, key, outcome.job))
        if new.idempotency_key:
            self._writing[key] = writing
        # Shielded: once the row is written the job must be queued, even if the caller goes
        # away meanwhile (its retry then finds the job by its key).
        try:
            job = await asyncio.shield(writing)
        except DuplicateKey:
            return await self._stored_under_key(new), True
        return job, job is not outcome.job

    async def _ended_under_key(self, new: NewJob) -> Job | None:
        """The ended job, no longer in memory, that `new` retries under its key (refused when
        `new` asks for another); None when there is none. Read only once some ended job lives
        in the store alone: until then the store's one thread is spared a read per refusal."""
        if not new.idempotency_key or not self._ended_outside_memory():
            return None
        stored = await self._store.by_key(new.tenant, new.idempotency_key)
        return None if stored is None else _same_request(stored[0], new)

    async def _stored_under_key(self, new: NewJob) -> Job:
        """The ended job the store holds under the new job's key, the scheduler having
        dropped it from memory (ended_jobs.py); refused when `new` asks for another."""
        stored = await self._store.by_key(new.tenant, new.idempotency_key)
        if stored is None:
            # Purged at its retention between the insert and this read: a retry is new.
            raise Unavailable(
                "idempotency_key: the earlier job under this key just ended its retention; retry"
            )
        return _same_request(stored[0], new)

    def _written(self, key: _Key, job: Job, writing: asyncio.Future[Job]) -> None:
        if self._writing.get(key) is writing:
            del self._writing[key]
        # Retrieved here as well: the caller may have gone before the write ended.
        if writing.cancelled() or writing.exception() is not None:
            # Never admitted (a failed write, or one cancelled, perhaps before it began):
            # it must not keep its place in the queue's and the tenant's limits.
            self._core.release(job)

    async def _persist_and_admit(self, job: Job) -> Job:
        try:
            await self._store.insert(job)
        except DuplicateKey:
            # Not the store failing: the key names an ended job no longer in memory.
            raise
        except Exception as exc:
            metrics.STORE_WRITE_FAILURES.labels("insert").inc()
            self._health.failed(INSERTS)
            log.warning("job %s not accepted: the job store failed: %s", job.job_id, exc)
            raise StoreUnavailable(
                "the job store cannot take new jobs right now; retry", reason=STORE_UNAVAILABLE
            ) from exc
        self._health.succeeded(INSERTS)
        accepted = self._core.admit(job)
        self._apply(self._core.take_effects())
        return accepted.job
