"""A job listing's pages: the tenant's jobs in a fixed order, filtered, continued after a job."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.scheduler.core.job_listing import JobQuery, list_jobs
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.core.scheduler import Accepted, SchedulerCore
from tests.unit.scheduler.fakes import FakeClock, make_core, new_job


def submitted(core: SchedulerCore, clock: FakeClock, **kwargs: object) -> str:
    clock.advance(1.0)
    outcome = core.submit(new_job(**kwargs))  # type: ignore[arg-type]
    assert isinstance(outcome, Accepted), outcome
    return outcome.job.job_id


def ids(core: SchedulerCore, tenant: str, query: JobQuery, admin: bool = False) -> list[str]:
    return [job.job_id for job in list_jobs(core.jobs, tenant, query, admin=admin).jobs]


@pytest.fixture
def core_and_clock() -> tuple[SchedulerCore, FakeClock]:
    clock = FakeClock()
    return make_core(clock), clock


def test_pages_walk_every_job_newest_first_then_oldest_first(core_and_clock) -> None:
    core, clock = core_and_clock
    mine = [submitted(core, clock) for _ in range(5)]
    submitted(core, clock, tenant="t2")
    first = list_jobs(core.jobs, "t1", JobQuery(page_size=2))
    assert [job.job_id for job in first.jobs] == [mine[4], mine[3]] and first.has_more
    second = ids(core, "t1", JobQuery(page_size=2, after_job_id=mine[3]))
    assert second == [mine[2], mine[1]]
    last = list_jobs(core.jobs, "t1", JobQuery(page_size=2, after_job_id=mine[1]))
    assert [job.job_id for job in last.jobs] == [mine[0]] and not last.has_more
    assert ids(core, "t1", JobQuery(oldest_first=True)) == mine
    assert ids(core, "t1", JobQuery(oldest_first=True, after_job_id=mine[2])) == mine[3:]


def test_a_full_last_page_says_no_more_follow(core_and_clock) -> None:
    core, clock = core_and_clock
    for _ in range(4):
        submitted(core, clock)
    page = list_jobs(core.jobs, "t1", JobQuery(page_size=4))
    assert len(page.jobs) == 4 and not page.has_more


def test_jobs_accepted_in_the_same_instant_keep_one_order_across_pages(core_and_clock) -> None:
    core, clock = core_and_clock
    clock.advance(1.0)
    same_time = []
    for _ in range(5):
        outcome = core.submit(new_job())
        assert isinstance(outcome, Accepted)
        same_time.append(outcome.job.job_id)
    walked: list[str] = []
    after = ""
    while True:
        page = list_jobs(core.jobs, "t1", JobQuery(page_size=2, after_job_id=after))
        walked += [job.job_id for job in page.jobs]
        if not page.has_more:
            break
        after = walked[-1]
    assert sorted(walked) == sorted(same_time) and len(set(walked)) == 5


def test_filters_by_state_and_model(core_and_clock) -> None:
    core, clock = core_and_clock
    flux = submitted(core, clock)
    wan = submitted(core, clock, model="wan-tiny")
    cancelled = submitted(core, clock)
    core.cancel(cancelled)
    assert ids(core, "t1", JobQuery(states=frozenset({JobState.CANCELLED}))) == [cancelled]
    assert ids(core, "t1", JobQuery(models=frozenset({"wan-tiny"}))) == [wan]
    queued_flux = JobQuery(states=frozenset({JobState.QUEUED}), models=frozenset({"flux-tiny"}))
    assert ids(core, "t1", queued_flux) == [flux]


def test_other_tenants_are_neither_listed_nor_usable_as_a_page_start(core_and_clock) -> None:
    core, clock = core_and_clock
    mine = submitted(core, clock)
    theirs = submitted(core, clock, tenant="t2")
    assert ids(core, "t1", JobQuery()) == [mine]
    with pytest.raises(InvalidArgument) as caught:
        list_jobs(core.jobs, "t1", JobQuery(after_job_id=theirs))
    # The same words as for a job that never existed: no other tenant's ids leak.
    unknown = pytest.raises(InvalidArgument)
    with unknown as never:
        list_jobs(core.jobs, "t1", JobQuery(after_job_id="no-such-job"))
    assert str(caught.value).replace(theirs, "X") == str(never.value).replace("no-such-job", "X")
    assert str(caught.value).startswith("after_job_id: no job ")
    assert ids(core, "ops", JobQuery(), admin=True) == [theirs, mine]


def test_page_size_and_filter_counts_are_bounded(core_and_clock) -> None:
    core, _ = core_and_clock
    with pytest.raises(InvalidArgument, match=r"page_size: 101; at most 100 jobs"):
        list_jobs(core.jobs, "t1", JobQuery(page_size=101))
    many = frozenset(f"m{i}" for i in range(65))
    with pytest.raises(InvalidArgument, match=r"models: 65 names; at most 64"):
        list_jobs(core.jobs, "t1", JobQuery(models=many))


def test_page_size_zero_takes_twenty(core_and_clock) -> None:
    core, clock = core_and_clock
    for _ in range(25):
        submitted(core, clock)
    page = list_jobs(core.jobs, "t1", JobQuery())
    assert len(page.jobs) == 20 and page.has_more
