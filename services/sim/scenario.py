"""What a simulation runs: fleet, workload, spot behaviour and autoscaling, from YAML or JSON.

The scheduler section is the mesh's own `SchedulerSettings`, so a scenario is judged by the
same queues, SLAs, placement rules and aging the real scheduler is configured with.
"""

from __future__ import annotations

import json
import re
from importlib.resources import as_file, files
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mediamesh.common.registry import ModelSpec, Registry, load_registry, parse_registry
from mediamesh.common.settings import Pool, PriorityName, SchedulerSettings
from mediamesh.sim.errors import ScenarioError as ScenarioError
from mediamesh.sim.load_checks import check_scenario

# A scenario's name becomes part of its result files' names (sim-NAME.json), in --out.
_FILE_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceType(Section):
    """One kind of accelerator: what it costs and how fast it runs each model."""

    # Price per device-hour by pool; a pool left out (or all, None) keeps the scenario's
    # scheduler.prices_per_device_hour, as the mesh's config keeps the default of a pool it
    # does not price: left out, a pool would run for free.
    price_per_hour: dict[Pool, Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = None
    # Seconds of one denoising step for a batch of one, per work unit (megapixel-frame or
    # audio second): the same unit as the registry's cost.step_s_per_megapixel.
    step_s_per_unit: dict[str, Annotated[float, Field(gt=0)]]
    # Fixed seconds per job (text encoders, decode); the registry's cost.overhead_s if absent.
    overhead_s: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    # A batch of b costs b**batch_exponent times a batch of one (0.8: batching saves 24 % at 4).
    batch_exponent: float = Field(0.8, gt=0, le=1)


class Autoscale(Section):
    """A KEDA ScaledObject on the scheduler's per queue and pool metric."""

    min_replicas: int = Field(0, ge=0)
    max_replicas: int = Field(ge=1)
    # metricType AverageValue: device-seconds of demand one replica should carry.
    threshold: float = Field(gt=0)
    activation_threshold: float = Field(0.0, ge=0)
    polling_s: float = Field(30.0, gt=0)
    cooldown_s: float = Field(300.0, ge=0)
    # HPA behaviour policies (deploy/k8s/keda: up max(100 %, 4 pods) per 15 s, down 1 pod per
    # 60 s). None leaves that direction unlimited.
    scale_up_percent: float | None = Field(None, gt=0)
    scale_up_pods: int | None = Field(None, ge=1)
    scale_up_period_s: float = Field(15.0, gt=0)
    scale_down_pods: int | None = Field(None, ge=1)
    scale_down_period_s: float = Field(60.0, gt=0)
    # "demand" is the manifests' metric, mediamesh_queue_pool_demand_seconds: work queued
    # for the pool plus work running on it. "backlog" (mediamesh_queue_pool_work_seconds,
    # queued work only) reads near zero while a pool keeps up, and so shrinks a busy pool
    # until a backlog builds: kept to show that.
    metric: Literal["demand", "backlog"] = "demand"


class Deployment(Section):
    """A group of identical workers: one device each, one pool, one modality or all models."""

    name: str
    device: str
    pool: Pool = "on-demand"
    # Models of this modality the device type has a speed for; None hosts all of them.
    modality: Literal["image", "video", "audio"] | None = None
    replicas: int = Field(0, ge=0)
    autoscale: Autoscale | None = None

    @model_validator(mode="after")
    def _scaled_pools_have_a_queue(self) -> Deployment:
        if self.autoscale is not None and self.modality is None:
            raise ValueError(f"deployment {self.name!r}: autoscale needs a modality (its queue)")
        scale = self.autoscale
        if scale is not None and scale.min_replicas > scale.max_replicas:
            # Refused rather than clamped: which of the two the author meant is unknown.
            raise ValueError(
                f"deployment {self.name!r}: autoscale.min_replicas ({scale.min_replicas}) "
                f"must be at most autoscale.max_replicas ({scale.max_replicas})"
            )
        return self

    @property
    def can_serve(self) -> bool:
        """Whether this deployment ever has a replica: one to start with, or an autoscaler
        (max_replicas is at least 1) to add one."""
        return self.replicas > 0 or self.autoscale is not None


class Arrivals(Section):
    process: Literal["poisson", "bursty", "diurnal", "trace"] = "poisson"
    # poisson and diurnal (the mean of the sinusoid).
    rate_per_s: float = Field(10.0, gt=0)
    # bursty: on/off Poisson with exponentially distributed period lengths.
    burst_rate_per_s: float = Field(50.0, ge=0)
    idle_rate_per_s: float = Field(1.0, ge=0)
    mean_burst_s: float = Field(30.0, gt=0)
    mean_idle_s: float = Field(120.0, gt=0)
    # diurnal: rate(t) = rate * (1 + amplitude * sin(2 pi (t + phase_s) / period_s)).
    amplitude: float = Field(0.5, ge=0, le=1)
    period_s: float = Field(86_400.0, gt=0)
    phase_s: float = 0.0
    # trace: JSON lines {"t": s, "model": ..., "priority": ..., "tenant": ...}; relative paths
    # are resolved against the scenario file.
    path: Path | None = None

    @model_validator(mode="after")
    def _can_make_jobs(self) -> Arrivals:
        if self.process == "trace" and self.path is None:
            raise ValueError("path: required for process trace (a JSON-lines file)")
        if self.process == "bursty" and self.burst_rate_per_s == 0 and self.idle_rate_per_s == 0:
            # Both spells would pass without an arrival, for ever.
            raise ValueError(
                "burst_rate_per_s and idle_rate_per_s are both 0: a bursty process makes no "
                "job; give either a rate above 0"
            )
        return self


class Tenant(Section):
    share: float = Field(1.0, gt=0)
    weight: float = Field(1.0, gt=0)
    max_queued: int = Field(0, ge=0)
    max_running: int = Field(0, ge=0)


def _only_standard() -> dict[PriorityName, float]:
    return {"STANDARD": 1.0}


class Workload(Section):
    jobs: int = Field(10_000, ge=1)
    arrivals: Arrivals = Field(default_factory=Arrivals)
    # Relative weights; normalised.
    models: dict[str, Annotated[float, Field(gt=0)]]
    priorities: dict[PriorityName, Annotated[float, Field(gt=0)]] = Field(
        default_factory=_only_standard
    )
    tenants: dict[str, Tenant] = Field(default_factory=lambda: {"default": Tenant()})
    # Generation parameters per model over the registry defaults (steps, width, height, ...).
    params: dict[str, dict[str, float | int]] = Field(default_factory=dict)


class Spot(Section):
    # Poisson rate of preemption notices per spot device.
    preemptions_per_device_hour: float = Field(0.0, ge=0)
    notice_s: float = Field(30.0, ge=0)


class RightSize(Section):
    target: float = Field(0.99, gt=0, le=1)
    # Priorities whose jobs count towards the target; all when empty.
    priorities: list[PriorityName] = Field(default_factory=list)
    spot_shares: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5]
    )
    # Device types to try; all of the scenario's when empty.
    devices: list[str] = Field(default_factory=list)
    # Seconds of arrivals each trial simulates (keeps the search fast).
    window_s: float = Field(300.0, gt=0)
    max_jobs: int = Field(60_000, ge=100)


class Scenario(Section):
    name: str = "scenario"
    seed: int = 0
    # Registry file (relative to the scenario) or inline models; the default registry if neither.
    registry_path: Path | None = None
    models: list[dict[str, Any]] | None = None
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    device_types: dict[str, DeviceType]
    fleet: list[Deployment]
    # Seconds from asking for a replica to it registering (node provisioning + model load).
    startup_s: float = Field(60.0, ge=0)
    spot: Spot = Field(default_factory=Spot)
    workload: Workload
    # Arrivals stop at the workload's job count; jobs still queued this long after the last
    # arrival count as unfinished.
    drain_s: float = Field(3600.0, gt=0)
    sample_s: float = Field(0.0, ge=0)
    # 0: the scheduler passes after every event, as the runtime's kick does. A period models
    # a dispatch loop busy long enough to coalesce the events that arrive meanwhile.
    dispatch_interval_s: float = Field(0.0, ge=0)
    right_size: RightSize = Field(default_factory=RightSize)

    @field_validator("name")
    @classmethod
    def _plain_file_name_part(cls, name: str) -> str:
        if not _FILE_NAME_PART.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a plain file-name part (it names the result files, "
                "sim-NAME.json): letters, digits, '.', '_' and '-', at most 100, not starting "
                "with '.' or '-'"
            )
        return name

    @model_validator(mode="after")
    def _references_resolve(self) -> Scenario:
        if not self.fleet:
            # Every job would stay queued to the end of the run: nothing to simulate.
            raise ValueError("fleet: needs at least one deployment")
        for deployment in self.fleet:
            if deployment.device not in self.device_types:
                raise ValueError(
                    f"deployment {deployment.name!r}: unknown device type {deployment.device!r}"
                )
        names = [d.name for d in self.fleet]
        if len(set(names)) != len(names):
            raise ValueError("deployment names must be unique")
        unknown = [d for d in self.right_size.devices if d not in self.device_types]
        if unknown:
            raise ValueError(
                f"right_size.devices: unknown device types {unknown}; "
                f"device_types has {', '.join(self.device_types)}"
            )
        return self

    def prices(self, device: str) -> dict[str, float]:
        """Price per device-hour of `device` in every pool: its own where it names one, the
        scheduler's prices_per_device_hour for the rest."""
        prices: dict[Pool, float] = {
            **self.scheduler.prices_per_device_hour,
            **(self.device_types[device].price_per_hour or {}),
        }
        return {pool: price for pool, price in prices.items()}

    def registry(self) -> Registry:
        if self.models is not None:
            return parse_registry({"models": self.models}, f"scenario {self.name!r}")
        if self.registry_path is not None:
            return load_registry(self.registry_path)
        return load_registry()

    def specs(self) -> dict[str, ModelSpec]:
        return {spec.name: spec for spec in self.registry().models}


def parse_scenario(raw: object, origin: str = "scenario", base: Path | None = None) -> Scenario:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{origin}: expected a mapping at the top level")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(_error_text(e["loc"], e["msg"]) for e in exc.errors())
        raise ScenarioError(f"{origin}: {details}") from None
    if base is not None:
        scenario = _resolve_paths(scenario, base)
    check_scenario(scenario, origin)
    return scenario


def _error_text(loc: tuple[int | str, ...], message: str) -> str:
    """One validation error as `field.path: reason`; a check of the whole scenario (no
    path) names its fields itself, and pydantic's "Value error, " says nothing to a user."""
    message = message.removeprefix("Value error, ")
    return f"{'.'.join(str(p) for p in loc)}: {message}" if loc else message


def _resolve_paths(scenario: Scenario, base: Path) -> Scenario:
    updates: dict[str, Any] = {}
    if scenario.registry_path is not None and not scenario.registry_path.is_absolute():
        updates["registry_path"] = base / scenario.registry_path
    trace = scenario.workload.arrivals.path
    if trace is not None and not trace.is_absolute():
        arrivals = scenario.workload.arrivals.model_copy(update={"path": base / trace})
        workload = scenario.workload.model_copy(update={"arrivals": arrivals})
        updates["workload"] = workload
    return scenario.model_copy(update=updates) if updates else scenario


BUILTIN_SCENARIOS = ("small", "fleet-1000")


def load_scenario(path: Path | str) -> Scenario:
    """Load a scenario file, or a shipped one by name (`small`, `fleet-1000`)."""
    if str(path) in BUILTIN_SCENARIOS:
        resource = files("mediamesh.sim") / "scenarios" / f"{path}.yaml"
        with as_file(resource) as shipped:
            return load_scenario(shipped)
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"scenario {path} cannot be parsed: {exc}") from None
    return parse_scenario(raw, str(path), base=path.parent)
