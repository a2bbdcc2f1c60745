"""Events from device threads reach the loop complete and in order, a burst at a time."""

from __future__ import annotations

import asyncio
import threading

from mediamesh.worker.core.handoff import Handoff


async def test_a_burst_from_a_thread_arrives_whole_in_order_with_one_wake_up() -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[int] = asyncio.Queue()
    handoff = Handoff(loop, queue)
    wake_ups = 0
    original = loop.call_soon_threadsafe

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal wake_ups
        wake_ups += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        # The loop is busy (blocked in join) while the thread reports: one burst.
        thread = threading.Thread(target=lambda: [handoff.put(i) for i in range(500)])
        thread.start()
        thread.join()
        received = [await asyncio.wait_for(queue.get(), 5) for _ in range(500)]
    finally:
        loop.call_soon_threadsafe = original  # type: ignore[method-assign]
    assert received == list(range(500))
    assert wake_ups == 1
    # Later events wake it again.
    handoff.put(500)
    assert await asyncio.wait_for(queue.get(), 5) == 500


async def test_events_put_together_arrive_in_one_delivery_though_the_loop_runs_between() -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[int] = asyncio.Queue()
    handoff = Handoff(loop, queue)
    got_zero = threading.Event()
    put_first = threading.Event()
    release = threading.Event()

    def step() -> None:
        handoff.put(0)  # delivered alone: no hold
        got_zero.wait(5)  # a hold also keeps back what was put before it
        with handoff.together():
            handoff.put(1)
            put_first.set()
            release.wait(5)  # the loop is free here, as when a device thread is switched out
            handoff.put(2)

    thread = threading.Thread(target=step)
    thread.start()
    assert await asyncio.wait_for(queue.get(), 5) == 0
    got_zero.set()
    await asyncio.to_thread(put_first.wait, 5)
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert queue.empty()  # 1 is held while the hold lasts
    release.set()
    await asyncio.to_thread(thread.join, 5)
    first = await asyncio.wait_for(queue.get(), 5)
    # One callback put both in the queue, so the reader finds the second there already.
    rest = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [first, *rest] == [1, 2]
