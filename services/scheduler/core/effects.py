"""What the core asks its owner to do after each call: persist, publish, dispatch, cancel."""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.core.jobs import Job, JobState


@dataclass(frozen=True)
class Transition:
    """A job entered `state`; the owner writes it to the store and tells watchers."""

    job: Job
    state: JobState
    reason: str = ""


@dataclass(frozen=True)
class Dispatch:
    """Send these jobs to this worker as one batch."""

    batch_id: str
    worker_id: str
    address: str
    model: str
    jobs: tuple[Job, ...]
    # Seconds each job waited in its queue before this dispatch, in `jobs` order.
    waits: tuple[float, ...]


@dataclass(frozen=True)
class CancelOnWorker:
    """Stop these jobs at their next step on this worker."""

    worker_id: str
    address: str
    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    """Informational event for the job's watchers (fallback, preemption, requeue)."""

    job: Job
    kind: str
    message: str


@dataclass(frozen=True)
class Progressed:
    """A step finished; watchers get it, the store need not."""

    job: Job
    step: int
    total_steps: int


Effect = Transition | Dispatch | CancelOnWorker | Notice | Progressed
