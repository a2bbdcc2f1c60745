"""Jobs being written to the store count against the queue's max_depth and the tenant's
max_queued: concurrent submits checked while earlier ones await a slow store cannot overfill
either limit, and a job whose write fails gives its place back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mediamesh.common.errors import MeshError, StatusCode, Unavailable
from mediamesh.scheduler.core.jobs import Job, TenantQuota
from mediamesh.scheduler.core.policy import QueuePolicy
from mediamesh.scheduler.submissions import Submissions

from .fakes import FakeClock, make_core, new_job

DEPTH = 5


class SlowStore:
    """Each insert waits until released; the first `failures` of them then fail."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.release = asyncio.Event()
        self.inserted: list[Job] = []

    async def insert(self, job: Job) -> None:
        await self.release.wait()
        if self.failures:
            self.failures -= 1
            raise OSError("disk I/O error")
        self.inserted.append(job)


def submissions(store: SlowStore, max_depth: int = DEPTH) -> Submissions:
    queues = {"image": QueuePolicy(sla_s=10.0, max_depth=max_depth)}
    core = make_core(FakeClock(), queues=queues)
    return Submissions(core, store, lambda effects: None)  # type: ignore[arg-type]


async def submit_all(subs: Submissions, store: SlowStore, count: int, **kwargs: Any) -> list:
    """`count` concurrent submits, all checked before the store lets any write finish."""
    tasks = [
        asyncio.create_task(subs.submit(new_job(seed=seed, **kwargs))) for seed in range(count)
    ]
    await asyncio.sleep(0)  # each task runs up to its store write (or its refusal)
    await asyncio.sleep(0)
    store.release.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_submits_never_queue_more_than_max_depth() -> None:
    store = SlowStore()
    subs = submissions(store)
    outcomes = await submit_all(subs, store, 3 * DEPTH)
    accepted = [o for o in outcomes if isinstance(o, tuple)]
    refused = [o for o in outcomes if isinstance(o, MeshError)]
    assert len(accepted) == DEPTH and len(refused) == 2 * DEPTH
    assert subs._core.queue_depth("image") == DEPTH  # type: ignore[attr-defined]
    assert all(e.code is StatusCode.RESOURCE_EXHAUSTED for e in refused)
    assert refused[0].message == (
        f"queue 'image' is full: 0 jobs queued and {DEPTH} being admitted, max_depth is {DEPTH}"
    )


async def test_concurrent_submits_never_queue_more_than_the_tenants_limit() -> None:
    store = SlowStore()
    subs = submissions(store, max_depth=100)
    quota = TenantQuota(max_queued=3)
    outcomes = await submit_all(subs, store, 8, quota=quota)
    accepted = [o for o in outcomes if isinstance(o, tuple)]
    refused = [o for o in outcomes if isinstance(o, MeshError)]
    assert len(accepted) == 3 and len(refused) == 5
    assert refused[0].message == (
        "max_queued_jobs: tenant 't1' has 0 jobs queued and 3 being admitted, the limit is 3"
    )
    # Another tenant is not held to t1's count.
    other = await subs.submit(new_job(seed=99, tenant="t2", quota=quota))
    assert other[0].tenant == "t2"


async def test_a_failed_write_gives_its_place_back() -> None:
    store = SlowStore(failures=DEPTH)
    subs = submissions(store)
    outcomes = await submit_all(subs, store, DEPTH)
    assert all(isinstance(o, Unavailable) for o in outcomes)
    # Nothing queued and nothing being admitted: the queue takes DEPTH jobs again.
    again = await submit_all(subs, store, DEPTH)
    assert all(isinstance(o, tuple) for o in again)
    assert subs._core.queue_depth("image") == DEPTH  # type: ignore[attr-defined]


async def test_a_cancelled_write_gives_its_place_back() -> None:
    store = SlowStore()
    subs = submissions(store, max_depth=1)
    first = asyncio.create_task(subs.submit(new_job(seed=1)))
    await asyncio.sleep(0)
    with pytest.raises(MeshError, match="being admitted"):
        await asyncio.wait_for(subs.submit(new_job(seed=2)), 5)  # not left waiting on the store
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task() and task is not first:
            task.cancel()  # the write itself, as a scheduler shutting down cancels it
    await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await first
    store.release.set()
    job, deduplicated = await subs.submit(new_job(seed=3))
    assert not deduplicated and store.inserted == [job]
