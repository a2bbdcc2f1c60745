"""How a worker runs a batch, independent of torch and gRPC.

A model host runs one batch at a time in its own thread. It reads `BatchControl` at every
step boundary and reports through an `emit` callback that must be thread-safe. What it
reports (`WorkerEvent`) is shared with the scheduler and lives in `mediamesh.common.work`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from mediamesh.common.errors import Unavailable
from mediamesh.common.work import WorkerEvent

Emit = Callable[[WorkerEvent], None]


class DeviceGroupLost(Unavailable):
    """The devices a host runs on are gone (a rank of its group died): a fault of the
    worker, not of the batch's jobs, which the scheduler puts back in line."""


class BatchCancelled(Exception):
    """Raised from a step callback to stop the denoising loop; never a result."""


class ControlView(Protocol):
    """BatchControl's read side: what a host polls at each step boundary. A tensor-parallel
    rank polls a copy synchronised over its group instead (worker.parallel.sync)."""

    def is_cancelled(self, job_id: str) -> bool: ...

    @property
    def preempt_requested(self) -> bool: ...


class BatchControl:
    """Thread-safe flags a running batch polls at each step boundary."""

    def __init__(self, job_ids: list[str]) -> None:
        self._lock = threading.Lock()
        self._job_ids = list(job_ids)
        self._cancelled: set[str] = set()
        self._preempt = False

    def cancel(self, job_ids: list[str]) -> list[str]:
        with self._lock:
            found = [j for j in job_ids if j in self._job_ids]
            self._cancelled.update(found)
            return found

    def preempt(self) -> None:
        with self._lock:
            self._preempt = True

    def is_cancelled(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._cancelled

    @property
    def preempt_requested(self) -> bool:
        with self._lock:
            return self._preempt

    @property
    def all_cancelled(self) -> bool:
        with self._lock:
            return all(j in self._cancelled for j in self._job_ids)
