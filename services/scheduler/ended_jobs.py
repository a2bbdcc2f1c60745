"""Ended jobs: the newest held in memory, older ones read back from the job store.

Every ended job used to stay in the scheduler's memory until its retention ran out, to
answer GetJob, Watch, ListJobs and idempotent retries. At a hundred jobs a second a day's
retention is 8.6 million jobs, about 1.4 KB each in memory; each listing walked all of them
on the event loop (15 ms per 100,000), and a restart loaded every one.

Now at most `ended_jobs_in_memory` ended jobs stay, the ones whose end was stored last; an
older one is dropped from memory once its end is in the store, and read back from there
when asked for. Unfinished jobs are always in memory: they are the core's working set.

A listing merges the two: the jobs in memory, and the store's ended rows at or below the
largest end key (finished_at, job_id) dropped so far. Every job dropped is at or below it,
so no row is missed; a job at or below it that is still held (ends do not land in exact
time order) comes from both, and the one in memory is kept.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any, NamedTuple

from mediamesh.scheduler.core.interface import SchedulingCore
from mediamesh.scheduler.core.job_listing import (
    JobPage,
    JobQuery,
    ListingPlace,
    OrderKey,
    cursor_key,
    matching,
    page_of,
    place_of,
)
from mediamesh.scheduler.core.jobs import Job
from mediamesh.scheduler.store.artifacts import StoredArtifact
from mediamesh.scheduler.store.job_reads import EndKey
from mediamesh.scheduler.store.job_store import JobStore, LoadedJobs


class JobRecord(NamedTuple):
    """A job and its stored result (None without one), from memory or the store."""

    job: Job
    artifact: StoredArtifact | None


def _record(stored: tuple[Job, dict[str, Any] | None]) -> JobRecord:
    job, result = stored
    return JobRecord(job, StoredArtifact(**result) if result else None)


class EndedJobs:
    """Which ended jobs the scheduler holds, and reads of those it no longer does."""

    def __init__(
        self,
        core: SchedulingCore,
        store: JobStore,
        results: dict[str, StoredArtifact],
        capacity: int,
    ) -> None:
        self._core = core
        self._store = store
        # The runtime's results of jobs in memory; dropped with their jobs.
        self._results = results
        self.capacity = capacity
        # Ended jobs in memory whose end is stored, in the order it was (an ordered set).
        self._held: dict[str, None] = {}
        # The largest end key of a job dropped from memory; None while none was.
        self.dropped_up_to: EndKey | None = None
        # Jobs dropped from memory and still in the store, by state.
        self._dropped_counts: Counter[str] = Counter()

    @property
    def held(self) -> int:
        """Ended jobs in memory whose end is stored."""
        return len(self._held)

    # ---- what moves jobs in and out of memory --------------------------------------------

    def loaded(self, loaded: LoadedJobs) -> None:
        """A restart took back `loaded.ended` (already given to the core) and left the
        older ended jobs in the store."""
        for job, _ in loaded.ended:
            self._held[job.job_id] = None
        self.dropped_up_to = loaded.left_out_up_to
        self._dropped_counts = Counter(loaded.left_out_counts)
        self._drop_beyond_capacity()

    def stored(self, jobs: list[Job]) -> None:
        """The end of each of `jobs` is in the store: the oldest held beyond the capacity
        leave memory."""
        table = self._core.jobs
        for job in jobs:
            if table.get(job.job_id) is job:
                self._held[job.job_id] = None
        self._drop_beyond_capacity()

    def purged(self, job_id: str, state: str) -> None:
        """The store deleted the job (its retention ended, or DeleteJob); the caller forgets
        it too."""
        # The held set's values are all None: membership, not pop's answer, tells.
        if job_id in self._held:
            del self._held[job_id]
        elif self._dropped_counts[state] > 0:
            self._dropped_counts[state] -= 1

    def _drop_beyond_capacity(self) -> None:
        table = self._core.jobs
        while len(self._held) > self.capacity:
            job_id = next(iter(self._held))
            del self._held[job_id]
            job = table.get(job_id)
            if job is None or not job.state.terminal:
                continue
            key = (job.finished_at or 0.0, job_id)
            if self.dropped_up_to is None or key > self.dropped_up_to:
                self.dropped_up_to = key
            self._dropped_counts[job.state.value] += 1
            self._core.forget(job_id)
            self._results.pop(job_id, None)

    # ---- reads ---------------------------------------------------------------------------

    def counts_by_state(self) -> dict[str, int]:
        """Every job within retention by state: those in memory and those dropped."""
        counts = Counter(job.state.value for job in self._core.jobs.values())
        counts.update(self._dropped_counts)
        return {state: n for state, n in counts.items() if n > 0}

    async def find(self, job_id: str) -> JobRecord | None:
        """The job from memory, or an ended one from the store; None when neither has it."""
        job = self._core.jobs.get(job_id)
        if job is not None:
            return JobRecord(job, self._results.get(job_id))
        if self.dropped_up_to is None:
            return None
        stored = await self._store.get(job_id)
        # A row not yet ended and not in memory is a job still being admitted.
        if stored is None or not stored[0].state.terminal:
            return None
        return _record(stored)

    async def by_key(self, tenant: str, idempotency_key: str) -> JobRecord | None:
        """The tenant's stored job submitted under `idempotency_key` (its row, read back)."""
        stored = await self._store.by_key(tenant, idempotency_key)
        return _record(stored) if stored is not None else None

    async def page(
        self, tenant: str, query: JobQuery, *, admin: bool = False
    ) -> tuple[list[JobRecord], bool]:
        """A page of the listing `query` asks for, from memory and the store, and whether
        more jobs follow it."""
        query = query.checked()
        after: OrderKey | None = None
        if query.after_job_id:
            place = await self._place(query.after_job_id)
            after = cursor_key(query, place, tenant, admin=admin)
        table = self._core.jobs
        in_memory = matching(table.values(), tenant, query, admin=admin, after=after)
        stored = await self._stored_candidates(tenant, query, admin=admin, after=after)
        page: JobPage = page_of(itertools.chain(in_memory, (r.job for r in stored)), query)
        artifacts = {r.job.job_id: r.artifact for r in stored}
        records = [
            JobRecord(job, self._results.get(job.job_id) or artifacts.get(job.job_id))
            for job in page.jobs
        ]
        return records, page.has_more

    async def _place(self, job_id: str) -> ListingPlace | None:
        """Where the job stands in listings: it is in memory or the store, or was deleted
        (DeleteJob) and the store kept its place until its retention would have ended."""
        record = await self.find(job_id)
        if record is not None:
            return place_of(record.job)
        deleted = await self._store.deleted_place(job_id)
        if deleted is None:
            return None
        tenant, created_at = deleted
        return ListingPlace(tenant, (created_at, job_id))

    async def _stored_candidates(
        self, tenant: str, query: JobQuery, *, admin: bool, after: OrderKey | None
    ) -> list[JobRecord]:
        """The listing's first page and one more among the store's rows of jobs dropped from
        memory, in its order, less those also held in memory. Enough: a row's place among
        these rows is never behind its place in the whole listing, and the rows skipped are
        candidates from memory already."""
        if self.dropped_up_to is None:
            return []
        rows = await self._store.ended_page(
            up_to=self.dropped_up_to,
            tenant=None if admin else tenant,
            states=[s.value for s in query.states],
            models=list(query.models),
            after=after,
            oldest_first=query.oldest_first,
            limit=query.page_size + 1,
        )
        table = self._core.jobs
        return [_record(r) for r in rows if r[0].job_id not in table]
