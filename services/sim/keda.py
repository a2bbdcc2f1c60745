"""KEDA's scaling rule for a Prometheus trigger with metricType AverageValue.

KEDA activates a ScaledObject (0 -> 1) when the metric exceeds activationThreshold and hands
1..N to the HPA, which asks for ceil(metric / threshold) replicas. Scale-down waits out the
cooldown: the HPA's stabilisation window keeps the highest recommendation seen during it,
and KEDA returns to zero only after the trigger has been inactive for cooldownPeriod. The
HPA's behaviour policies, when given, cap how fast replicas are added and removed.
"""

from __future__ import annotations

import math
from collections import deque

from mediamesh.sim.scenario import Autoscale


def keda_desired(metric: float, threshold: float, min_replicas: int, max_replicas: int) -> int:
    """The HPA's AverageValue formula, clamped to the ScaledObject's replica range."""
    raw = math.ceil(metric / threshold) if metric > 0 else 0
    return min(max(raw, min_replicas), max_replicas)


class KedaScaler:
    """Replica target of one ScaledObject, evaluated every pollingInterval."""

    def __init__(self, spec: Autoscale, now: float = 0.0, replicas: int = 0) -> None:
        self.spec = spec
        self._last_active = now
        # Like the HPA after a restart, hold the replicas we start with for one window.
        self._recommendations: deque[tuple[float, int]] = deque([(now, replicas)])
        # (time, replicas) after each change, for the behaviour policies' periods.
        self._history: deque[tuple[float, int]] = deque([(now, replicas)], maxlen=256)

    def poll(self, now: float, metric: float, current: int) -> int:
        spec = self.spec
        active = metric > spec.activation_threshold
        if active:
            self._last_active = now
        if current == 0:
            # Only activation wakes a pool from zero; the HPA takes over from one.
            if not active:
                return spec.min_replicas
            return self._record(now, keda_desired(metric, spec.threshold, 1, spec.max_replicas))
        if spec.min_replicas == 0 and not active and now - self._last_active >= spec.cooldown_s:
            self._recommendations.clear()
            return self._record(now, 0)
        floor = max(spec.min_replicas, 1)
        recommended = keda_desired(metric, spec.threshold, floor, spec.max_replicas)
        # Scale-down stabilisation: the highest recommendation within the cooldown window.
        window = self._recommendations
        window.append((now, recommended))
        while window and window[0][0] < now - spec.cooldown_s:
            window.popleft()
        stabilised = max(r for _, r in window)
        target = recommended if recommended >= current else min(stabilised, current)
        return self._record(now, self._rate_limited(now, current, target))

    def _rate_limited(self, now: float, current: int, target: int) -> int:
        spec = self.spec
        if target > current and (spec.scale_up_percent or spec.scale_up_pods):
            base = self._replicas_at(now - spec.scale_up_period_s)
            by_percent = math.ceil(base * (spec.scale_up_percent or 0) / 100)
            limit = base + max(by_percent, spec.scale_up_pods or 0)
            return max(min(target, limit), current)
        if target < current and spec.scale_down_pods:
            base = self._replicas_at(now - spec.scale_down_period_s)
            return min(max(target, base - spec.scale_down_pods), current)
        return target

    def _replicas_at(self, time: float) -> int:
        """Replicas at the start of a policy period, as the HPA measures its limits."""
        for at, replicas in reversed(self._history):
            if at <= time:
                return replicas
        return self._history[0][1]

    def _record(self, now: float, replicas: int) -> int:
        if replicas != self._history[-1][1]:
            self._history.append((now, replicas))
        return replicas
