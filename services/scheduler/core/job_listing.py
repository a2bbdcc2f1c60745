"""Which of a tenant's jobs one page of a job listing holds.

Pure: it reads the jobs it is given (the core's, and ended ones read back from the store)
and knows nothing of the transport. Jobs are ordered by acceptance time, ties
broken by id, so a page boundary is a position in a fixed order: a page continues after
the last job of the previous one, and jobs accepted meanwhile never shift what follows.
That job may have been deleted since: its place then comes from what the store keeps of
deleted jobs (store/deleted_jobs.py), and the page continues from where it stood.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

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


OrderKey = tuple[float, str]


def order_key(job: Job) -> OrderKey:
    """Where a job stands in every listing: acceptance time, ties broken by id."""
    return (job.created_at, job.job_id)


class ListingPlace(NamedTuple):
    """Where a job stands in listings and whose it is: all a cursor needs of its job, and
    all that is kept of a deleted one."""

    tenant: str
    key: OrderKey


def place_of(job: Job) -> ListingPlace:
    """The job's place in listings, with its tenant."""
    return ListingPlace(job.tenant, order_key(job))


def cursor_key(
    query: JobQuery, place: ListingPlace | None, tenant: str, *, admin: bool
) -> OrderKey:
    """Where the page `query` asks for starts: past `place`, that of the job
    `query.after_job_id` names (None when there is none); InvalidArgument unless the
    caller may see that job."""
    if place is None or not (admin or place.tenant == tenant):
        # The same answer whether the job never existed, was forgotten or is another
        # tenant's: a listing must not reveal other tenants' job ids.
        raise InvalidArgument(
            f"after_job_id: no job {query.after_job_id!r} (it may have been forgotten "
            "when its result's retention ended); start the listing again without it"
        )
    return place.key


def matching(
    jobs: Iterable[Job], tenant: str, query: JobQuery, *, admin: bool, after: OrderKey | None
) -> Iterator[Job]:
    """The jobs `query` selects, in no particular order, past `after` in its direction."""
    for job in jobs:
        if not (admin or job.tenant == tenant):
            continue
        if query.states and job.state not in query.states:
            continue
        if query.models and job.model not in query.models:
            continue
        if after is not None:
            key = order_key(job)
            if key <= after if query.oldest_first else key >= after:
                continue
        yield job


def page_of(candidates: Iterable[Job], query: JobQuery) -> JobPage:
    """The first page of `candidates` in the order `query` asks for (a checked query)."""
    # One more than a page tells whether more follow, without sorting every job.
    pick = heapq.nsmallest if query.oldest_first else heapq.nlargest
    chosen = pick(query.page_size + 1, candidates, key=order_key)
    return JobPage(chosen[: query.page_size], len(chosen) > query.page_size)


def list_jobs(
    jobs: Mapping[str, Job], tenant: str, query: JobQuery, *, admin: bool = False
) -> JobPage:
    """The page of `tenant`'s jobs (every tenant's for `admin`) among `jobs` that `query`
    asks for, newest first unless it asks for oldest first."""
    query = query.checked()
    after = None
    if query.after_job_id:
        anchor = jobs.get(query.after_job_id)
        place = place_of(anchor) if anchor is not None else None
        after = cursor_key(query, place, tenant, admin=admin)
    return page_of(matching(jobs.values(), tenant, query, admin=admin, after=after), query)
