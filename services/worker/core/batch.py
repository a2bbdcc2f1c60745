"""What a batch is and what it reports, independent of torch and gRPC.

A model host runs one batch at a time in its own thread. It reads `BatchControl` at every
step boundary and reports through an `emit` callback that must be thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class JobParams:
    """One job of a batch, defaults already applied by the scheduler."""

    job_id: str
    prompt: str
    negative_prompt: str = ""
    steps: int = 4
    seed: int = 0
    width: int = 0
    height: int = 0
    num_frames: int = 0
    guidance_scale: float = 0.0
    duration_s: float = 0.0
    # Checkpoint reference to resume from; None starts at step 0.
    resume_checkpoint: str | None = None
    # Write a checkpoint every N steps (0 = only when preempted).
    checkpoint_every_steps: int = 0


@dataclass(frozen=True)
class StepDone:
    job_id: str
    step: int
    total_steps: int
    # Wall seconds of this step for the whole batch, for the scheduler's cost model.
    step_seconds: float


@dataclass(frozen=True)
class JobFinished:
    job_id: str
    data: bytes
    mime_type: str
    seed: int


@dataclass(frozen=True)
class JobFailed:
    job_id: str
    # gRPC status code name: "CANCELLED", "INTERNAL", "INVALID_ARGUMENT", ...
    code: str
    message: str


@dataclass(frozen=True)
class JobPreempted:
    job_id: str
    checkpoint: str
    step: int


@dataclass(frozen=True)
class JobCheckpointed:
    job_id: str
    checkpoint: str
    step: int


@dataclass(frozen=True)
class JobNotice:
    job_id: str
    # "resumed" (from a checkpoint) or "restarted" (checkpoint unreadable, from step 0).
    kind: str
    message: str


WorkerEvent = JobFinished | JobFailed | StepDone | JobPreempted | JobCheckpointed | JobNotice
Emit = Callable[[WorkerEvent], None]


class BatchCancelled(Exception):
    """Raised from a step callback to stop the denoising loop; never a result."""


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
