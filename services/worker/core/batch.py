"""How a worker runs a batch, independent of torch and gRPC.

A model host runs one batch at a time in its own thread. It reads `BatchControl` at every
step boundary and reports through an `emit` callback that must be thread-safe. What it
reports (`WorkerEvent`) is shared with the scheduler and lives in `mediamesh.common.work`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from mediamesh.common.errors import Unavailable
from mediamesh.common.work import WorkerEvent
from mediamesh.worker.core.gate import DeviceGate, Rank

Emit = Callable[[WorkerEvent], None]


def emitted_together(emit: Emit) -> AbstractContextManager[object]:
    """Holds `emit`'s deliveries until the block ends, when `emit` can (the runtime's
    Handoff does), so a step's events for the whole batch go out as one message."""
    together = getattr(emit, "together", None)
    return together() if callable(together) else nullcontext()


class DeviceGroupLost(Unavailable):
    """The devices a host runs on are gone (a rank of its group died): a fault of the
    worker, not of the batch's jobs, which the scheduler puts back in line."""


class BatchCancelled(Exception):
    """Raised from a step callback to stop the denoising loop; never a result."""


class ControlView(Protocol):
    """BatchControl's read side: what a host polls at each step boundary. A tensor-parallel
    rank polls a copy synchronised over its group instead (worker.parallel.sync)."""

    def is_cancelled(self, job_id: str) -> bool:
        """Whether `job_id` has been cancelled; the host then stops it at this boundary."""

    @property
    def preempt_requested(self) -> bool:
        """Whether the batch should checkpoint its jobs and stop at this boundary."""


class BatchControl:
    """Thread-safe flags a running batch polls at each step boundary."""

    def __init__(self, job_ids: list[str]) -> None:
        self._lock = threading.Lock()
        self._job_ids = list(job_ids)
        self._cancelled: set[str] = set()
        # Those of the cancelled jobs that end for good (see `cancel`).
        self._ended: set[str] = set()
        self._preempt = False
        self._pause = False
        # The worker's device gate and this batch's place in it, for pausing (see gate.py).
        self._gate: DeviceGate | None = None
        self._batch_id = ""
        self._off_device = False

    def attach_gate(self, gate: DeviceGate, batch_id: str) -> None:
        """The gate this batch holds while it runs; without one it cannot pause."""
        self._gate, self._batch_id = gate, batch_id

    def leave_device(self) -> None:
        """The batch needs the device no more for now (it encodes its results): the next
        batch in line may start. `enter_device` takes it back."""
        gate = self._gate
        if gate is not None and not self._off_device:
            self._off_device = True
            gate.release(self._batch_id)

    def enter_device(self) -> None:
        """Take the device back after `leave_device`, ahead of batches that have not started."""
        gate = self._gate
        if gate is not None and self._off_device:
            gate.enqueue(self._batch_id, Rank.RESUMING)
            if not gate.acquire(self._batch_id):
                raise BatchCancelled(f"batch {self._batch_id} was withdrawn")
            self._off_device = False

    def request_pause(self) -> None:
        """Asks the batch to give the device to a waiting urgent batch at its next step
        boundary and to resume once that one ends."""
        with self._lock:
            self._pause = True

    @property
    def pause_requested(self) -> bool:
        """Whether `request_pause` has been called and the batch has not paused since."""
        with self._lock:
            return self._pause

    def pause_here(self, on_pause: Callable[[], None], on_resume: Callable[[], None]) -> bool:
        """At a step boundary: if a pause was asked for and an urgent batch waits, call
        `on_pause`, let the urgent work run, take the device back, call `on_resume`, and
        return True. Otherwise (or with nothing waiting any more) return False at once."""
        with self._lock:
            asked, self._pause = self._pause, False
        gate = self._gate
        if not asked or gate is None or not gate.urgent_waiting():
            return False
        on_pause()
        if not gate.step_aside(self._batch_id):
            # Its caller went away while it stood aside: the batch stops here.
            raise BatchCancelled(f"batch {self._batch_id} was withdrawn")
        on_resume()
        return True

    def cancel(self, job_ids: list[str], *, discard_checkpoints: bool = False) -> list[str]:
        """Marks those of `job_ids` that are in this batch cancelled: they stop at the next
        step boundary. Returns them.

        By default the jobs only stop here (the batch's stream to the scheduler broke, the
        worker stops): the scheduler puts them back in line and they resume from their
        latest checkpoint, so it stays on disk. `discard_checkpoints` is for jobs that end
        for good (the scheduler's Cancel: cancelled by request or past their deadline),
        whose checkpoints no attempt will read again."""
        with self._lock:
            found = [j for j in job_ids if j in self._job_ids]
            self._cancelled.update(found)
            if discard_checkpoints:
                self._ended.update(found)
            return found

    def discards_checkpoints(self, job_id: str) -> bool:
        """Whether `job_id` was cancelled for good (`cancel`'s `discard_checkpoints`)."""
        with self._lock:
            return job_id in self._ended

    def preempt(self) -> None:
        """Asks the batch to checkpoint and stop at its next step boundary."""
        with self._lock:
            self._preempt = True

    def is_cancelled(self, job_id: str) -> bool:
        """Whether `job_id` has been cancelled."""
        with self._lock:
            return job_id in self._cancelled

    @property
    def preempt_requested(self) -> bool:
        """Whether `preempt` has been called."""
        with self._lock:
            return self._preempt

    @property
    def all_cancelled(self) -> bool:
        """Whether every job of the batch has been cancelled."""
        with self._lock:
            return all(j in self._cancelled for j in self._job_ids)
