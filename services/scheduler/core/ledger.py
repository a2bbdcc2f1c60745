"""Device-seconds and money, by pool, model and tenant."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class CostLedger:
    """Device-seconds spent by pool, model and tenant, and what they cost."""

    prices_per_device_hour: dict[str, float]
    by_pool: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_model: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_tenant: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def record(self, pool: str, model: str, tenant: str, device_seconds: float) -> None:
        """Add device-seconds one job spent on a pool."""
        self.by_pool[pool] += device_seconds
        self.by_model[model] += device_seconds
        self.by_tenant[tenant] += device_seconds

    def cost(self) -> float:
        """What every recorded device-second cost, at its pool's price."""
        return sum(
            s / 3600 * self.prices_per_device_hour.get(p, 0.0) for p, s in self.by_pool.items()
        )

    def on_demand_cost(self) -> float:
        """What the same device-seconds would have cost on the on-demand pool alone."""
        return sum(self.by_pool.values()) / 3600 * self.prices_per_device_hour.get("on-demand", 0.0)
