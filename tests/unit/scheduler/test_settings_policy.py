"""The core's policy comes from SchedulerSettings alone: the core has no values of its own."""

from __future__ import annotations

import dataclasses
import itertools

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import PlacementSettings, QueueSettings, SchedulerSettings
from mediamesh.scheduler.core.jobs import Priority
from mediamesh.scheduler.core.policy import CorePolicy
from mediamesh.scheduler.core.scheduler import SchedulerCore
from mediamesh.scheduler.core.units import Placement
from mediamesh.scheduler.settings_policy import core_policy


def test_the_core_policy_has_no_defaults_to_drift_from_the_settings():
    fields = dataclasses.fields(CorePolicy)
    assert all(f.default is dataclasses.MISSING for f in fields)
    assert all(f.default_factory is dataclasses.MISSING for f in fields)


def test_every_setting_reaches_the_policy():
    settings = SchedulerSettings(
        queues={"image": QueueSettings(sla_s=7.0, max_depth=9)},
        aging_s_per_class=12.0,
        max_attempts=5,
        heartbeat_interval_s=2.0,
        heartbeat_misses_allowed=2,
        placement={"STANDARD": PlacementSettings(prefer="spot", allow=["spot"])},
        prices_per_device_hour={"on-demand": 9.0, "spot": 2.5},
    )
    policy = core_policy(settings)
    assert (policy.queues["image"].sla_s, policy.queues["image"].max_depth) == (7.0, 9)
    assert policy.aging_s_per_class == 12.0
    assert policy.max_worker_losses == 5
    assert policy.heartbeat_timeout_s == 6.0
    assert policy.placements[Priority.STANDARD] == Placement("spot", frozenset({"spot"}), 30.0)
    assert set(policy.placements) == set(Priority)
    assert policy.prices_per_device_hour == {"on-demand": 9.0, "spot": 2.5}


def test_the_cost_ledger_prices_come_from_the_settings():
    settings = SchedulerSettings(prices_per_device_hour={"on-demand": 3.6, "spot": 1.8})
    ids = itertools.count()
    core = SchedulerCore(
        load_registry().models, core_policy(settings), lambda: 0.0, lambda: f"j{next(ids)}"
    )
    core.ledger.record("spot", "flux-tiny", "t", 3600.0)
    assert core.ledger.cost() == 1.8
    assert core.ledger.on_demand_cost() == 3.6
