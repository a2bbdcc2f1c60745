"""Which of a tenant's jobs one page of a job listing holds.

Pure: it reads the jobs the core holds (queued, on a worker, or ended and not yet
forgotten) and knows nothing of the transport. Jobs are ordered by acceptance time, ties
broken by id, so a page boundary is a position in a fixed order: a page continues after
the last job of the previous one, and jobs accepted meanwhile never shift what follows.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.scheduler.core.jobs import Job, JobState

DEFAULT_PAGE_SIZE = 20
# More model names than a registry would sensibly hold; bounds the filter's cost.
MAX_MODEL_FILTERS = 64


@dataclass(frozen=True)
class JobQuery:
    """What a caller asks a listing for: filters, page size and where the page starts."""

    states: frozenset[JobState] = frozenset()
    models: frozenset[str] = frozenset()
    page_size: int = 0
    after_job_id: str = ""
    oldest_first: bool = False

    def checked(self) -> JobQuery:
        """The query with its page size resolved; InvalidArgument naming a field out of range."""
        if self.page_size > MAX_JOB_PAGE_SIZE:
            raise InvalidArgument(
                f"page_size: {self.page_size}; at most {MAX_JOB_PAGE_SIZE} jobs fit in one page"
            )
        if len(self.models) > MAX_MODEL_FILTERS:
            raise InvalidArgument(
                f"models: {len(self.models)} names; at most {MAX_MODEL_FILTERS} may be given"
            )
        size = self.page_size or DEFAULT_PAGE_SIZE
        return JobQuery(self.states, self.models, size, self.after_job_id, self.oldest_first)


@dataclass(frozen=True)
class JobPage:
    """One page of a listing, in the order asked for."""

    jobs: list[Job]
    # More jobs match after the last one of this page.
    has_more: bool


def _order_key(job: Job) -> tuple[float, str]:
    return (job.created_at, job.job_id)


def list_jobs(
    jobs: Mapping[str, Job], tenant: str, query: JobQuery, *, admin: bool = False
) -> JobPage:
    """The page of `tenant`'s jobs (every tenant's for `admin`) that `query` asks for,
    newest first unless it asks for oldest first."""
    query = query.checked()
    visible = (job for job in jobs.values() if admin or job.tenant == tenant)
    candidates: Iterable[Job] = (
        job
        for job in visible
        if (not query.states or job.state in query.states)
        and (not query.models or job.model in query.models)
    )
    if query.after_job_id:
        anchor = jobs.get(query.after_job_id)
        if anchor is None or not (admin or anchor.tenant == tenant):
            # The same answer whether the job never existed, was forgotten or is another
            # tenant's: a listing must not reveal other tenants' job ids.
            raise InvalidArgument(
                f"after_job_id: no job {query.after_job_id!r} (it may have been forgotten "
                "when its result's retention ended); start the listing again without it"
            )
        boundary = _order_key(anchor)
        candidates = (
            job
            for job in candidates
            if (_order_key(job) > boundary if query.oldest_first else _order_key(job) < boundary)
        )
    # One more than a page tells whether more follow, without sorting every job.
    pick = heapq.nsmallest if query.oldest_first else heapq.nlargest
    chosen = pick(query.page_size + 1, candidates, key=_order_key)
    return JobPage(chosen[: query.page_size], len(chosen) > query.page_size)
