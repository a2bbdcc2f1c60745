"""Whether the job store takes writes: what the scheduler's readiness follows.

A scheduler whose store fails answers every Submit UNAVAILABLE and keeps no state change,
yet it used to report SERVING, so readiness kept routing work to it. Each kind of write
(new jobs, state changes) is failing from a failure until its next success; the store is
failing while either is. A readiness that is NOT_SERVING gets no Submits, so inserts would
never be tried again: `JobStore.probe` stands in for them meanwhile (see the runtime).
"""

from __future__ import annotations

import asyncio

# The kinds of write: a new job's row, and the writer's state changes.
INSERTS = "insert"
TRANSITIONS = "transition"


class StoreHealth:
    def __init__(self) -> None:
        self._failing: set[str] = set()
        # Set at each change of `failing`, for whoever reports health; cleared by them.
        self.changed = asyncio.Event()

    @property
    def failing(self) -> bool:
        """Whether some kind of write failed last time it was tried."""
        return bool(self._failing)

    def failing_kinds(self) -> list[str]:
        return sorted(self._failing)

    def is_failing(self, kind: str) -> bool:
        return kind in self._failing

    def failed(self, kind: str) -> None:
        if kind not in self._failing:
            was_failing = self.failing
            self._failing.add(kind)
            if not was_failing:
                self.changed.set()

    def succeeded(self, kind: str) -> None:
        if kind in self._failing:
            self._failing.discard(kind)
            if not self.failing:
                self.changed.set()
