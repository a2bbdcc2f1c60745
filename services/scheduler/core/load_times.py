"""Load times the scheduler learns from workers: of models (residency) and adapters (affinity).

Pure: workers repeat their last measured load seconds in every heartbeat, so only a changed
value per worker counts as a new measurement.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)

# Weight of a new measurement in the learned load time.
_SMOOTHING = 0.3
# A reported load time beyond this is not a measurement (nor is NaN, zero or negative).
_MAX_LOAD_S = 3600.0


class LearnedLoadTimes(Generic[Key]):
    """Smoothed seconds of one load per key, with a prior until the first measurement."""

    def __init__(self, prior_s: float) -> None:
        self._prior_s = prior_s
        self._load_s: dict[Key, float] = {}
        # (worker, key) -> the seconds that worker last reported.
        self._reported: dict[tuple[str, Key], float] = {}

    def estimate(self, key: Key) -> float:
        """Expected seconds of one load of `key`."""
        return self._load_s.get(key, self._prior_s)

    def observe(self, key: Key, seconds: float) -> None:
        """One measured load of `key`."""
        if not 0 < seconds <= _MAX_LOAD_S:
            return
        old = self._load_s.get(key)
        self._load_s[key] = seconds if old is None else old + _SMOOTHING * (seconds - old)

    def reported(self, worker_id: str, key: Key, seconds: float) -> None:
        """A worker's report of its last load of `key`; learned from when it changed."""
        if seconds and self._reported.get((worker_id, key)) != seconds:
            self._reported[(worker_id, key)] = seconds
            self.observe(key, seconds)
