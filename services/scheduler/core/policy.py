"""The scheduler core's fixed policy: queue limits, aging, placement, liveness and prices."""

from __future__ import annotations

from dataclasses import dataclass

from mediamesh.scheduler.core.jobs import Priority
from mediamesh.scheduler.core.units import Placement


@dataclass(frozen=True)
class QueuePolicy:
    """One modality's queue: its latency target and how many jobs it may hold."""

    sla_s: float
    max_depth: int


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
