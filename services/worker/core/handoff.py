"""Events from a device thread to the event loop, one loop wake-up per burst.

A batch of 16 jobs reports 16 events per step; waking the loop for each (a write to its
self-pipe and a callback) cost the worker a noticeable share of its time. Events queue here
and the loop is woken only when none was pending, so a burst costs one wake-up; the order
of events is kept.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Generic, TypeVar

Event = TypeVar("Event")


class Handoff(Generic[Event]):
    """A thread-safe `put` feeding an asyncio.Queue on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Event]) -> None:
        self._loop = loop
        self._queue = queue
        self._lock = threading.Lock()
        self._pending: deque[Event] = deque()

    def put(self, event: Event) -> None:
        """Queue `event` from any thread."""
        with self._lock:
            self._pending.append(event)
            if len(self._pending) > 1:
                return  # a wake-up is already on its way and will take this one too
        self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            events = list(self._pending)
            self._pending.clear()
        for event in events:
            self._queue.put_nowait(event)
