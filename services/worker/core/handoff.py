"""Events from a device thread to the event loop, one loop wake-up per burst.

A batch of 16 jobs reports 16 events per step; waking the loop for each (a write to its
self-pipe and a callback) cost the worker a noticeable share of its time. Events queue here
and the loop is woken only when none was pending, so a burst costs one wake-up; the order
of events is kept.

A burst is otherwise whatever the loop finds when it wakes, which under CPU contention can
be half a step. `together()` makes a step's events one burst for certain: nothing is
delivered while it is held, so the sender can pack the step into one message.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

Event = TypeVar("Event")


class Handoff(Generic[Event]):
    """A thread-safe `put` feeding an asyncio.Queue on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Event]) -> None:
        self._loop = loop
        self._queue = queue
        self._lock = threading.Lock()
        self._pending: deque[Event] = deque()
        self._holds = 0

    def __call__(self, event: Event) -> None:
        """`put`, so the handoff itself is a host's `emit`."""
        self.put(event)

    def put(self, event: Event) -> None:
        """Queue `event` from any thread."""
        with self._lock:
            self._pending.append(event)
            if len(self._pending) > 1 or self._holds:
                return  # a wake-up is on its way, or the hold's end sends one
        self._loop.call_soon_threadsafe(self._deliver)

    @contextmanager
    def together(self) -> Iterator[None]:
        """The events put inside reach the loop in one delivery."""
        with self._lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds -= 1
                wake = not self._holds and bool(self._pending)
            if wake:
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            if self._holds:
                return  # the hold's end wakes the loop again
            events = list(self._pending)
            self._pending.clear()
        for event in events:
            self._queue.put_nowait(event)
