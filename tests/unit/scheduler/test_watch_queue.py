"""A watcher's queue stays bounded however slow it reads, and never loses what matters."""

from __future__ import annotations

import asyncio

from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.events import EventHub, WatchEvent, WatchQueue


def progress(step: int, total: int = 10_000) -> WatchEvent:
    return WatchEvent("j", JobState.RUNNING, "progress", step=step, total_steps=total)


def notice(kind: str) -> WatchEvent:
    return WatchEvent("j", JobState.RUNNING, "notice", notice=kind)


async def drain(queue: WatchQueue) -> list[WatchEvent]:
    events = []
    while len(queue):
        events.append(await queue.get())
    return events


async def test_a_watcher_that_never_reads_stays_bounded_and_still_gets_the_result():
    hub = EventHub(capacity=16)
    queue = hub.subscribe("j")
    hub.publish(notice("dispatched"))
    for step in range(1, 10_001):
        hub.publish(progress(step))
        assert len(queue) <= 16
    hub.publish(WatchEvent("j", JobState.SUCCEEDED, "result"))
    assert len(queue) <= 16
    events = await drain(queue)
    assert events[0].kind == "notice"
    assert events[-1].kind == "result"
    steps = [e.step for e in events if e.kind == "progress"]
    # The latest progress survives, in order; the oldest were coalesced away.
    assert steps == sorted(steps) and steps[-1] == 10_000
    assert len(events) == 16 and queue.coalesced == 1 + 10_000 + 1 - 16


async def test_notices_and_the_error_are_never_dropped_and_order_is_kept():
    queue = WatchQueue(capacity=4)
    published = [progress(1), notice("preempted"), progress(2), notice("requeued")]
    published += [progress(s) for s in range(3, 50)]
    published += [notice("resumed"), progress(50), WatchEvent("j", JobState.FAILED, "error")]
    for event in published:
        queue.put_nowait(event)
    events = await drain(queue)
    kept = [e.notice for e in events if e.kind == "notice"]
    assert kept == ["preempted", "requeued", "resumed"]
    assert events[-1].kind == "error"
    # What is left is a subsequence of what was published: nothing reordered.
    positions = [published.index(e) for e in events]
    assert positions == sorted(positions)
    assert len(events) <= 4 + 1  # the error arrived when only notices could have made room


async def test_get_waits_for_the_next_event():
    queue = WatchQueue()
    waiter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.put_nowait(progress(1))
    assert (await asyncio.wait_for(waiter, 1)).step == 1


async def test_a_final_only_watcher_gets_nothing_but_the_end():
    hub = EventHub(capacity=16)
    everything, final_only = hub.subscribe("j"), hub.subscribe("j", final_only=True)
    hub.publish(notice("dispatched"))
    for step in range(1, 5):
        hub.publish(progress(step, total=4))
        assert len(final_only) == 0
    hub.publish(WatchEvent("j", JobState.SUCCEEDED, "result"))
    assert [e.kind for e in await drain(final_only)] == ["result"]
    assert len(await drain(everything)) == 6
    hub.unsubscribe("j", final_only)
    hub.unsubscribe("j", everything)
    hub.publish(WatchEvent("j", JobState.SUCCEEDED, "result"))
    assert len(final_only) == len(everything) == 0
