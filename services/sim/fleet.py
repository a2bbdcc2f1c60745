"""Simulated devices: how fast they run a batch, what they cost, and how many each pool has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.jobs import GenerationParams, Job
from mediamesh.scheduler.core.units import WorkerInfo
from mediamesh.sim.scenario import Deployment, DeviceType


class Speed:
    """Batch timing of one device type for the workload's parameters of each model."""

    def __init__(
        self,
        device: DeviceType,
        specs: dict[str, ModelSpec],
        params: dict[str, GenerationParams],
    ) -> None:
        self.exponent = device.batch_exponent
        # (seconds per step for a batch of one, fixed seconds per job) by model.
        self.single: dict[str, tuple[float, float]] = {}
        for model, step_s in device.step_s_per_unit.items():
            spec = specs[model]
            units = params[model].work_units(spec.modality) if model in params else 1.0
            overhead = device.overhead_s.get(model, spec.cost.overhead_s)
            self.single[model] = (step_s * units, overhead)
        self._scale = [0.0] + [b**self.exponent for b in range(1, 257)]

    def batch(self, model: str, size: int) -> tuple[float, float]:
        """(seconds per step, fixed seconds) for a batch of `size` jobs of `model`."""
        step_s, overhead = self.single[model]
        scale = self._scale[size]
        return step_s * scale, overhead * scale


@dataclass(slots=True, eq=False)
class RunningBatch:
    batch_id: str
    jobs: tuple[Job, ...]
    started_at: float
    step_s: float
    overhead_s: float
    ends_at: float


@dataclass(slots=True, eq=False)
class Device:
    worker_id: str
    deployment: int
    pool: str
    device_type: str
    models: frozenset[str]
    speed: Speed
    provisioned_at: float
    ready: bool = False
    # Asked to stop: no new work; leaves when its batch ends (scale-down) or at the end of
    # a spot notice.
    draining: bool = False
    gone_at: float | None = None
    batch: RunningBatch | None = None
    busy_s: float = 0.0

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            worker_id=self.worker_id,
            address=f"sim://{self.worker_id}",
            pool=self.pool,
            devices=(self.device_type,),
            models=self.models,
        )


@dataclass
class DeploymentState:
    spec: Deployment
    models: frozenset[str]
    target: int
    # Devices that count towards the target: starting or serving, not draining.
    members: list[Device] = field(default_factory=list)
    started: int = 0

    @property
    def ready_count(self) -> int:
        return sum(1 for d in self.members if d.ready)


def hosted_models(
    deployment: Deployment, device: DeviceType, specs: dict[str, ModelSpec]
) -> frozenset[str]:
    return frozenset(
        m
        for m in device.step_s_per_unit
        if deployment.modality is None or specs[m].modality == deployment.modality
    )


@dataclass
class Accounting:
    """Device-seconds provisioned and busy, and their price, by pool and device type."""

    # Every pool of every device type (Scenario.prices): a pool missing here is a bug, not free.
    prices: dict[str, dict[str, float]]
    provisioned_s: dict[tuple[str, str], float] = field(default_factory=dict)
    busy_s: dict[tuple[str, str], float] = field(default_factory=dict)

    def close(self, device: Device, now: float) -> None:
        key = (device.pool, device.device_type)
        end = device.gone_at if device.gone_at is not None else now
        self.provisioned_s[key] = self.provisioned_s.get(key, 0.0) + end - device.provisioned_at
        self.busy_s[key] = self.busy_s.get(key, 0.0) + device.busy_s

    def cost(self) -> float:
        return sum(
            s / 3600 * self.prices[kind][pool] for (pool, kind), s in self.provisioned_s.items()
        )

    def on_demand_cost(self) -> float:
        return sum(
            s / 3600 * self.prices[kind]["on-demand"] for (_, kind), s in self.provisioned_s.items()
        )

    def summary(self) -> dict[str, Any]:
        rows = []
        for key in sorted(self.provisioned_s):
            pool, kind = key
            provisioned = self.provisioned_s[key]
            busy = self.busy_s.get(key, 0.0)
            rows.append(
                {
                    "pool": pool,
                    "device": kind,
                    "device_hours": provisioned / 3600,
                    "busy_hours": busy / 3600,
                    "utilization": busy / provisioned if provisioned > 0 else 0.0,
                    "cost": provisioned / 3600 * self.prices[kind][pool],
                }
            )
        provisioned = sum(self.provisioned_s.values())
        busy = sum(self.busy_s.values())
        return {
            "by_pool_device": rows,
            "utilization": busy / provisioned if provisioned > 0 else 0.0,
            "cost": self.cost(),
            "on_demand_cost": self.on_demand_cost(),
            "savings": 1 - self.cost() / self.on_demand_cost() if self.on_demand_cost() else 0.0,
        }
