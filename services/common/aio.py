"""Small asyncio helpers."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` up to `timeout` seconds; True if it was set.

    Unlike `asyncio.wait_for` on Python 3.11, a cancellation that arrives just as the event
    is set is never swallowed, so a loop built on this always stops when its task is
    cancelled (a swallowed cancel once left a service's shutdown waiting forever).
    """
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)
