"""The scheduler core's policy as `SchedulerSettings` configure it.

The settings are the only source of every value the policy holds (prices, placement, aging,
liveness): the core keeps no defaults of its own, so the service, the simulator and the
metrics cannot disagree about them.
"""

from __future__ import annotations

from mediamesh.common.settings import SchedulerSettings
from mediamesh.scheduler.core.affinity import AffinityPolicy
from mediamesh.scheduler.core.jobs import Priority
from mediamesh.scheduler.core.policy import CorePolicy, DispatchPolicy, PausePolicy, QueuePolicy
from mediamesh.scheduler.core.residency import ResidencyPolicy
from mediamesh.scheduler.core.units import Placement


def core_policy(settings: SchedulerSettings) -> CorePolicy:
    """Translate the scheduler's settings into the core's plain-Python policy."""
    return CorePolicy(
        queues={
            name: QueuePolicy(
                q.sla_s,
                q.max_depth,
                {Priority[c]: sla for c, sla in q.class_sla_s.items()},
            )
            for name, q in settings.queues.items()
        },
        aging_s_per_class=settings.aging_s_per_class,
        max_worker_losses=settings.max_attempts,
        # A worker is lost once the heartbeats it was allowed to miss, and one more, are late.
        heartbeat_timeout_s=settings.heartbeat_interval_s * (settings.heartbeat_misses_allowed + 1),
        placements={
            Priority[name]: Placement(rule.prefer, frozenset(rule.allow), rule.fallback_after_s)
            for name, rule in settings.placement.items()
        },
        prices_per_device_hour={
            pool: price for pool, price in settings.prices_per_device_hour.items()
        },
        adapter_affinity=AffinityPolicy(
            margin_s=settings.adapter_affinity_margin_s,
            load_prior_s=settings.adapter_load_prior_s,
        ),
        residency=ResidencyPolicy(load_prior_s=settings.model_load_prior_s),
        pausing=PausePolicy(settings.pause_max_per_job, settings.pause_min_steps),
        dispatching=DispatchPolicy(
            settings.dispatch_ahead,
            settings.batch_window_when_idle,
            settings.dispatch_ahead_lead_s,
            settings.dispatch_ahead_tail_end,
        ),
    )
