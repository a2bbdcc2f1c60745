"""KEDA's formula and the scaler's activation, cooldown, stabilisation and rate limits."""

from __future__ import annotations

import pytest

from mediamesh.sim.keda import KedaScaler, keda_desired
from mediamesh.sim.scenario import Autoscale


def spec(**overrides: object) -> Autoscale:
    values: dict = {
        "min_replicas": 1,
        "max_replicas": 20,
        "threshold": 5.0,
        "activation_threshold": 1.0,
        "polling_s": 10.0,
        "cooldown_s": 300.0,
    }
    values.update(overrides)
    return Autoscale(**values)


@pytest.mark.parametrize(
    ("metric", "expected"),
    [(0.0, 1), (0.1, 1), (5.0, 1), (5.01, 2), (12.0, 3), (99.0, 20), (1e9, 20)],
)
def test_desired_is_ceil_of_metric_over_threshold_clamped(metric: float, expected: int) -> None:
    assert keda_desired(metric, 5.0, 1, 20) == expected


def test_desired_respects_a_zero_minimum() -> None:
    assert keda_desired(0.0, 5.0, 0, 4) == 0
    assert keda_desired(0.5, 5.0, 0, 4) == 1


def test_a_pool_at_zero_wakes_only_above_the_activation_threshold() -> None:
    scaler = KedaScaler(spec(min_replicas=0, activation_threshold=2.0), replicas=0)
    assert scaler.poll(10, metric=2.0, current=0) == 0
    assert scaler.poll(20, metric=2.5, current=0) == 1
    assert scaler.poll(30, metric=23.0, current=0) == 5


def test_scale_up_is_immediate_and_scale_down_waits_out_the_cooldown() -> None:
    scaler = KedaScaler(spec(), now=0, replicas=1)
    assert scaler.poll(0, metric=50.0, current=1) == 10
    # The recommendation of 10 stays in the window for cooldown_s.
    assert scaler.poll(100, metric=0.0, current=10) == 10
    assert scaler.poll(299, metric=0.0, current=10) == 10
    assert scaler.poll(301, metric=0.0, current=10) == 1


def test_initial_replicas_are_held_for_one_window() -> None:
    scaler = KedaScaler(spec(), now=0, replicas=8)
    assert scaler.poll(10, metric=0.0, current=8) == 8
    assert scaler.poll(310, metric=0.0, current=8) == 1


def test_inactive_pool_with_zero_minimum_goes_to_zero_after_cooldown() -> None:
    scaler = KedaScaler(spec(min_replicas=0, activation_threshold=2.0), now=0, replicas=3)
    assert scaler.poll(100, metric=1.0, current=3) == 3
    assert scaler.poll(299, metric=1.0, current=3) == 3
    assert scaler.poll(300, metric=1.0, current=3) == 0


def test_activity_resets_the_cooldown() -> None:
    scaler = KedaScaler(spec(min_replicas=0, activation_threshold=2.0), now=0, replicas=3)
    assert scaler.poll(250, metric=12.0, current=3) == 3
    assert scaler.poll(500, metric=0.0, current=3) == 3
    assert scaler.poll(551, metric=0.0, current=3) == 0


def test_scale_down_rate_limit_removes_pods_per_period() -> None:
    scaler = KedaScaler(
        spec(cooldown_s=0, scale_down_pods=2, scale_down_period_s=60), now=0, replicas=10
    )
    assert scaler.poll(1, metric=0.0, current=10) == 8
    # Still within the period that began at 10 replicas.
    assert scaler.poll(30, metric=0.0, current=8) == 8
    assert scaler.poll(62, metric=0.0, current=8) == 6


def test_scale_up_rate_limit_is_the_larger_of_percent_and_pods() -> None:
    scaler = KedaScaler(
        spec(scale_up_percent=100, scale_up_pods=4, scale_up_period_s=15), now=0, replicas=2
    )
    assert scaler.poll(0, metric=100.0, current=2) == 6  # max(+100 % of 2, +4)
    assert scaler.poll(16, metric=100.0, current=6) == 12  # +100 % of 6
    assert scaler.poll(32, metric=100.0, current=12) == 20  # capped by max_replicas
