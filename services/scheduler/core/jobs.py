"""Jobs as the scheduler core sees them: plain data, no transport types."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from mediamesh.common.generation import GenerationParams, Priority
from mediamesh.common.job_states import ENDED_STATE_NAMES
from mediamesh.scheduler.core.delivery import ResultDelivery

__all__ = ["GenerationParams", "Job", "JobState", "Priority", "TenantQuota"]


class JobState(StrEnum):
    """Where a job is: queued, on a worker (dispatched, running) or ended."""

    QUEUED = "QUEUED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"

    @property
    def terminal(self) -> bool:
        """Whether the job has ended (succeeded, failed, cancelled or expired)."""
        return self in TERMINAL_STATES

    @property
    def in_flight(self) -> bool:
        """Whether the job is on a worker (dispatched or running)."""
        return self in IN_FLIGHT_STATES


IN_FLIGHT_STATES = frozenset({JobState.DISPATCHED, JobState.RUNNING})
TERMINAL_STATES = frozenset(state for state in JobState if state.name in ENDED_STATE_NAMES)


@dataclass(frozen=True)
class TenantQuota:
    """A tenant's fair-share weight and its limits on queued and running jobs."""

    weight: float = 1.0
    # 0 means no limit.
    max_queued: int = 0
    max_running: int = 0


# Model, steps, width, height, frames, guidance, duration, strength, the input image's size
# (0, 0 without one), whether there is a mask, the adapter set with scales, and the cache.
CompatKey = tuple[
    str,
    int,
    int,
    int,
    int,
    float,
    float,
    float,
    tuple[int, int],
    bool,
    tuple[tuple[str, float], ...],
    bool,
]


@dataclass
class Job:
    """One generation request from acceptance to its end, as the core tracks it."""

    job_id: str
    tenant: str
    model: str
    queue: str
    priority: Priority
    # Once the job has ended, without its inline input bytes (see `JobLifecycle._finish`).
    params: GenerationParams
    created_at: float
    deadline: float | None = None
    idempotency_key: str = ""
    quota: TenantQuota = field(default_factory=TenantQuota)
    state: JobState = JobState.QUEUED
    # Estimated device-seconds for the whole job, from the cost model at acceptance.
    cost_s: float = 0.0
    # When the job last entered its queue (acceptance, requeue or preemption).
    enqueued_at: float = 0.0
    # Preempted or requeued jobs jump the line of their model.
    at_front: bool = False
    # Dispatches so far, and how many of them ended with the worker lost.
    attempts: int = 0
    worker_losses: int = 0
    worker_id: str | None = None
    # Kept after the job leaves its worker, for operators asking where it ran.
    last_worker_id: str = ""
    batch_id: str | None = None
    # The last step the current attempt reached; while it has reached none, the step it
    # starts after (its checkpoint's, or 0 when it starts over).
    step: int = 0
    total_steps: int = 0
    checkpoint: str | None = None
    # The step `checkpoint` was saved after: an attempt resuming from it starts there.
    checkpoint_step: int = 0
    finished_at: float | None = None
    error_code: str = ""
    error_message: str = ""
    spot_fallback: bool = False
    # Times its batch was paused at a step boundary for more urgent work.
    pauses: int = 0
    # W3C trace headers of the request that created the job, for the queue-wait span.
    trace_carrier: dict[str, str] = field(default_factory=dict)
    # Result URL and webhook options of the request.
    delivery: ResultDelivery = field(default_factory=ResultDelivery)

    @cached_property
    def compat_key(self) -> CompatKey:
        """Jobs may share a batch only if every tensor shape and the schedule agree.

        Cached: params never change after acceptance (but for the inline input bytes dropped
        at the end, which are not part of it), and batch forming reads this often."""
        p = self.params
        return (
            self.model,
            p.steps,
            p.width,
            p.height,
            p.num_frames,
            # Exact values: a batch runs one call with its first job's, so jobs whose values
            # differ by any amount would not get what they asked for.
            p.guidance_scale,
            p.duration_s,
            # diffusers takes one strength per call, so it is part of the key.
            p.strength,
            (p.image.width, p.image.height) if p.image else (0, 0),
            p.mask_image is not None,
            tuple((a.name, a.scale) for a in p.adapters),
            p.use_cache,
        )

    def start_over(self) -> None:
        """Leave the job at the step its next attempt starts from: its checkpoint's, or 0
        without one. Steps the last attempt ran past its checkpoint are lost with it, and
        a step it never reaches again must not be reported (GetJob, watchers, estimates)."""
        self.step = self.checkpoint_step if self.checkpoint else 0

    @property
    def remaining_fraction(self) -> float:
        """The share of its steps still to run (1 before it starts, less once resumed)."""
        total = self.total_steps or self.params.steps
        return max(total - self.step, 0) / max(total, 1)
