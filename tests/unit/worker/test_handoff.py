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
