"""What the core asks its owner to do after each call: persist, publish, dispatch, cancel.

Immutable records as named tuples: the core makes several per job, and a frozen dataclass
costs several times as much to create.
"""

from __future__ import annotations

from typing import NamedTuple

from mediamesh.common.work import Preview
from mediamesh.scheduler.core.jobs import Job, JobState


class Transition(NamedTuple):
    """A job entered `state`; the owner writes it to the store and tells watchers."""

    job: Job
    state: JobState
    reason: str = ""
    # The job's worker and batch when it entered `state`: by the time the owner applies the
    # effect, a requeued job may already be dispatched again, elsewhere.
    worker_id: str = ""
    batch_id: str = ""


class Dispatch(NamedTuple):
    """Send these jobs to this worker as one batch."""

    batch_id: str
    worker_id: str
    address: str
    model: str
    jobs: tuple[Job, ...]
    # Seconds each job waited in its queue before this dispatch, in `jobs` order.
    waits: tuple[float, ...]
    # A batch running on the worker to pause at its next step boundary for this one.
    pauses: str = ""


class CancelOnWorker(NamedTuple):
    """Stop these jobs at their next step on this worker."""

    worker_id: str
    address: str
    job_ids: tuple[str, ...]


class Notice(NamedTuple):
    """Informational event for the job's watchers (fallback, preemption, requeue)."""

    job: Job
    kind: str
    message: str
    # The worker the notice is about when the job has left it by the time the notice is
    # published (a requeue clears the job's worker); None: the job's own.
    worker_id: str | None = None


class Progressed(NamedTuple):
    """A step finished; watchers get it, the store need not."""

    job: Job
    step: int
    total_steps: int
    # The step's latent preview, passed through to watchers and never stored.
    preview: Preview | None = None


Effect = Transition | Dispatch | CancelOnWorker | Notice | Progressed
