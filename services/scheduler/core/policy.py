"""The scheduler core's fixed policy: queue limits, aging, placement, liveness and prices."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mediamesh.scheduler.core.affinity import AffinityPolicy
from mediamesh.scheduler.core.jobs import Priority
from mediamesh.scheduler.core.residency import ResidencyPolicy
from mediamesh.scheduler.core.units import Placement


@dataclass(frozen=True)
class QueuePolicy:
    """One modality's queue: its latency target, each class's own where it has one, and how
    many jobs it may hold."""

    sla_s: float
    max_depth: int
    class_sla_s: Mapping[Priority, float] = field(default_factory=dict)

    def sla_for(self, priority: Priority) -> float:
        """The latency target of a job of class `priority` in this queue."""
        return self.class_sla_s.get(priority, self.sla_s)


# Where a running batch's learned tail ends: at its first result, its last, or by device
# kind ("auto": first on an accelerator, last on a CPU).
TailEnd = Literal["auto", "first_result", "last_result"]


@dataclass(frozen=True)
class DispatchPolicy:
    """When a unit gets its next batch.

    `ahead`: a unit whose running batch has every job at its last step (only decoding and
    encoding left) takes one more batch, which waits on the worker, so the device never
    idles for the round trip between two batches. It takes it `ahead_lead_s` before the
    running batch is expected to end (batch_tails.py), not at once, so that the batch forms
    as late as it can and holds everyone who arrived by then. `window_when_idle`: a batch
    for an idle unit waits out its model's batch window to fill up; without it an idle
    device starts at once and the window applies only to the batch given ahead.
    """

    ahead: bool
    window_when_idle: bool
    ahead_lead_s: float = 0.0
    # Where a batch's tail ends (InFlight.batch_done).
    tail_end: TailEnd = "auto"


@dataclass(frozen=True)
class PausePolicy:
    """When a running batch may be paused at a step boundary for more urgent work.

    A batch is paused only for a job of a higher class that would otherwise miss its
    queue's SLA (per the cost model), and only if each of its jobs has run at least
    `min_steps` steps and been paused fewer than `max_per_job` times (0: never pause).
    """

    max_per_job: int
    min_steps: int


@dataclass(frozen=True)
class CorePolicy:
    """Everything the core decides by that is not a job, a worker or the clock.

    No defaults: SchedulerSettings is the one source of these values, and
    mediamesh.scheduler.settings_policy.core_policy builds this from it.
    """

    queues: dict[str, QueuePolicy]
    aging_s_per_class: float
    max_worker_losses: int
    heartbeat_timeout_s: float
    placements: dict[Priority, Placement]
    prices_per_device_hour: dict[str, float]
    adapter_affinity: AffinityPolicy
    residency: ResidencyPolicy
    pausing: PausePolicy
    dispatching: DispatchPolicy
