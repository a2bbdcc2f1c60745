"""The jobs the scheduler core holds, found by id or idempotency key, and their deadlines."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from mediamesh.scheduler.core.jobs import Job


class JobTable:
    """Every job in memory, its tenant's idempotency keys, and a heap of deadlines.

    A deadline entry goes stale when its job ends, is forgotten or changes deadline; stale
    entries are dropped when they reach the top.
    """

    def __init__(self) -> None:
        # Read-only outside this class.
        self.jobs: dict[str, Job] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._deadlines: list[tuple[float, str]] = []

    def add(self, job: Job) -> None:
        """Hold a job, findable by its id and by its tenant's idempotency key."""
        self.jobs[job.job_id] = job
        if job.idempotency_key:
            self._by_key[(job.tenant, job.idempotency_key)] = job.job_id

    def watch_deadline(self, job: Job) -> None:
        """Have `due` return the job once its deadline passes (if it has one)."""
        if job.deadline is not None:
            heapq.heappush(self._deadlines, (job.deadline, job.job_id))

    def by_key(self, tenant: str, idempotency_key: str) -> Job | None:
        """The job a tenant submitted earlier under this key, if it is still held."""
        existing = self._by_key.get((tenant, idempotency_key))
        return self.jobs.get(existing) if existing is not None else None

    def forget(self, job_id: str) -> None:
        """Drop a finished job; an unfinished one stays."""
        job = self.jobs.get(job_id)
        if job is None or not job.state.terminal:
            return
        del self.jobs[job_id]
        if job.idempotency_key:
            self._by_key.pop((job.tenant, job.idempotency_key), None)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a job still waiting for one."""
        deadlines = self._deadlines
        while deadlines and self._stale(deadlines[0]):
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def due(self, now: float) -> Iterator[Job]:
        """Jobs whose deadline is at or before `now`, earliest first, each taken off the heap.

        Lazy, so a job the caller ends before asking for the next counts as stale after.
        """
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            item = heapq.heappop(deadlines)
            if not self._stale(item):
                yield self.jobs[item[1]]

    def _stale(self, item: tuple[float, str]) -> bool:
        job = self.jobs.get(item[1])
        return job is None or job.state.terminal or job.deadline != item[0]
