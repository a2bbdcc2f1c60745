"""The gateway's model list for submissions: fetched once per interval, and once at a time."""

from __future__ import annotations

import asyncio

import pytest

from mediamesh.common.errors import Unavailable
from mediamesh.gateway.core.recent_models import RecentModels


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Scheduler:
    """Answers ListModels with the number of the call, after `release` when it is held."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.release.set()
        self.failing = False

    async def models(self) -> list[dict]:
        self.calls += 1
        call = self.calls
        await self.release.wait()
        if self.failing:
            raise Unavailable("the scheduler is unreachable")
        return [{"name": "echo", "call": call}]


async def test_submissions_within_the_interval_share_one_fetch() -> None:
    clock, scheduler = Clock(), Scheduler()
    recent = RecentModels(scheduler.models, fresh_s=1.0, clock=clock)
    assert (await recent.get())[0]["call"] == 1
    clock.now += 0.9
    assert (await recent.get())[0]["call"] == 1
    clock.now += 0.2
    assert (await recent.get())[0]["call"] == 2
    assert scheduler.calls == 2


async def test_callers_arriving_during_a_fetch_wait_for_it_instead_of_fetching_again() -> None:
    clock, scheduler = Clock(), Scheduler()
    recent = RecentModels(scheduler.models, clock=clock)
    scheduler.release.clear()
    waiting = [asyncio.ensure_future(recent.get()) for _ in range(20)]
    await asyncio.sleep(0)
    scheduler.release.set()
    answers = await asyncio.gather(*waiting)
    assert scheduler.calls == 1
    assert {answer[0]["call"] for answer in answers} == {1}


async def test_a_caller_that_leaves_does_not_cancel_the_fetch_the_others_wait_on() -> None:
    clock, scheduler = Clock(), Scheduler()
    recent = RecentModels(scheduler.models, clock=clock)
    scheduler.release.clear()
    leaving = asyncio.ensure_future(recent.get())
    staying = asyncio.ensure_future(recent.get())
    await asyncio.sleep(0)
    leaving.cancel()
    scheduler.release.set()
    assert (await staying)[0]["call"] == 1
    assert scheduler.calls == 1


async def test_a_failed_fetch_fails_its_callers_and_the_next_caller_fetches_again() -> None:
    clock, scheduler = Clock(), Scheduler()
    recent = RecentModels(scheduler.models, clock=clock)
    scheduler.failing = True
    with pytest.raises(Unavailable):
        await recent.get()
    scheduler.failing = False
    assert (await recent.get())[0]["call"] == 2


async def test_the_interval_counts_from_when_the_fetch_began() -> None:
    clock, scheduler = Clock(), Scheduler()
    recent = RecentModels(scheduler.models, fresh_s=1.0, clock=clock)
    scheduler.release.clear()
    fetching = asyncio.ensure_future(recent.get())
    while not scheduler.calls:
        await asyncio.sleep(0)
    clock.now += 0.8  # the scheduler took 0.8 s to answer
    scheduler.release.set()
    await fetching
    clock.now += 0.3
    assert (await recent.get())[0]["call"] == 2
