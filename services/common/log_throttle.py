"""One log line per kind and interval, for failures that repeat on every call or retry (a
refused credential, an unreachable peer): the first is news, the rest would flood the log."""

from __future__ import annotations

import time
from collections.abc import Callable

# What the mesh's services wait between two lines of one kind.
LOG_EVERY_S = 60.0


class LogThrottle:
    """Lets one log line of each kind through per `every_s`."""

    def __init__(
        self, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self._clock = clock
        self._last: dict[str, float] = {}

    def due(self, kind: str = "") -> bool:
        """Whether a line of `kind` may be logged now; if so, the next waits `every_s`."""
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            return False
        self._last[kind] = now
        return True

    def reset(self) -> None:
        """The failures are over: the next of any kind is news at once."""
        self._last.clear()
