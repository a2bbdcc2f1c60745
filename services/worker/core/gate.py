"""Who may use the device now: one batch at a time, urgent batches first.

A worker's batches each run in their own thread, but its device runs one batch at a time:
every batch holds the gate while it computes. A running batch asked to pause gives the gate
up at its next step boundary, with its state (latents, sampler, generators) kept where it
is, on its thread's stack, and waits in line again with a rank above ordinary batches, so
it resumes as soon as the urgent batch that paused it has ended.

A thread giving the device up first calls `on_leave`: the worker frees the thread's OpenMP
team there (models/openmp.py), so that the teams of threads not computing do not slow down
the one that is.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from enum import IntEnum


class Rank(IntEnum):
    """Order of batches waiting for the device; lower goes first."""

    URGENT = 0
    RESUMING = 1
    NORMAL = 2


class DeviceGate:
    """A lock over the device whose waiters go in (rank, arrival) order.

    `on_hand_over(previous, holder)` is called each time the device changes hands (either
    may be None: the device was or is now free), under the gate's lock so that the calls
    come in the order the hand-overs happened; it must be quick and not call the gate.
    `on_leave()` is called on the thread of a batch about to give the device up, or done
    with it (`release`, `step_aside`), outside the lock.
    """

    def __init__(
        self,
        on_hand_over: Callable[[str | None, str | None], None] | None = None,
        on_leave: Callable[[], None] | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._holder: str | None = None
        self._on_hand_over = on_hand_over
        self._on_leave = on_leave
        self._waiting: list[tuple[int, int, str]] = []
        self._arrivals = itertools.count()
        # Batches taken out of line whose threads have yet to learn it (see `withdraw`).
        self._withdrawn: set[str] = set()

    @property
    def holder(self) -> str | None:
        """The batch on the device now, if any."""
        with self._cond:
            return self._holder

    def enqueue(self, batch_id: str, rank: Rank) -> None:
        """Put a batch in line. Done on the event loop when the batch arrives, so that a
        batch asked to pause for it finds it waiting whenever it reaches its boundary."""
        with self._cond:
            heapq.heappush(self._waiting, (rank, next(self._arrivals), batch_id))
            self._cond.notify_all()

    def withdraw(self, batch_id: str) -> None:
        """Take a batch out of line: its caller has gone (the batch ended on the event
        loop's side, or the worker is stopping) while its thread waits for the device, or
        before that thread has even started. The thread's wait then ends without the device
        (`acquire` and `step_aside` return False) instead of lasting for ever, which held
        up the device pool's shutdown, and so the worker's."""
        with self._cond:
            kept = [w for w in self._waiting if w[2] != batch_id]
            if len(kept) != len(self._waiting):
                heapq.heapify(kept)
                self._waiting = kept
                self._withdrawn.add(batch_id)
                self._cond.notify_all()

    def acquire(self, batch_id: str) -> bool:
        """Block until `batch_id`, already in line, is first and the device is free, and
        take it; False, without the device, if the batch was withdrawn meanwhile."""
        with self._cond:
            return self._wait_and_take(batch_id)

    def release(self, batch_id: str) -> None:
        """The batch no longer uses the device."""
        self._leaving()
        with self._cond:
            if self._holder == batch_id:
                self._hold(None)
                self._cond.notify_all()

    def urgent_waiting(self) -> bool:
        """Whether an urgent batch waits for the device."""
        with self._cond:
            return any(w[0] == Rank.URGENT for w in self._waiting)

    def step_aside(self, batch_id: str) -> bool:
        """Called by the holder: let the waiting urgent batches run, then take the device
        back before any ordinary batch. Returns True holding the device again; False, not
        holding it, if the batch was withdrawn while it waited."""
        self._leaving()
        with self._cond:
            if self._holder == batch_id:
                self._hold(None)
            heapq.heappush(self._waiting, (Rank.RESUMING, next(self._arrivals), batch_id))
            self._cond.notify_all()
            return self._wait_and_take(batch_id)

    def _wait_and_take(self, batch_id: str) -> bool:
        """Called with the lock held, `batch_id` in line."""
        self._cond.wait_for(lambda: batch_id in self._withdrawn or self._is_next(batch_id))
        if batch_id in self._withdrawn:
            self._withdrawn.discard(batch_id)
            return False
        heapq.heappop(self._waiting)
        self._hold(batch_id)
        return True

    def _leaving(self) -> None:
        # Also when the batch let go earlier (to encode): what ran since is freed too.
        if self._on_leave is not None:
            self._on_leave()

    def _hold(self, holder: str | None) -> None:
        """Called with the lock held."""
        previous, self._holder = self._holder, holder
        if self._on_hand_over is not None and previous != holder:
            self._on_hand_over(previous, holder)

    def _is_next(self, batch_id: str) -> bool:
        return self._holder is None and bool(self._waiting) and self._waiting[0][2] == batch_id
