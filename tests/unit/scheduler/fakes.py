"""A hand-written clock and core builder for the scheduler's unit tests."""

from __future__ import annotations

import dataclasses
import itertools

from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import QueueSettings, SchedulerSettings
from mediamesh.scheduler.core.jobs import GenerationParams, Job, Priority, TenantQuota
from mediamesh.scheduler.core.scheduler import Accepted, NewJob, SchedulerCore
from mediamesh.scheduler.core.units import WorkerInfo
from mediamesh.scheduler.settings_policy import core_policy


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_core(clock: FakeClock, **policy_overrides: object) -> SchedulerCore:
    registry = load_registry()
    ids = itertools.count()
    settings = SchedulerSettings(
        queues={
            "image": QueueSettings(sla_s=10.0, max_depth=100),
            "video": QueueSettings(sla_s=120.0, max_depth=100),
            "audio": QueueSettings(sla_s=30.0, max_depth=100),
        }
    )
    policy = dataclasses.replace(core_policy(settings), **policy_overrides)  # type: ignore[arg-type]
    return SchedulerCore(registry.models, policy, clock, lambda: f"job-{next(ids)}")


def worker(
    worker_id: str, models: tuple[str, ...] = ("flux-tiny",), pool: str = "on-demand"
) -> WorkerInfo:
    return WorkerInfo(worker_id, f"{worker_id}:1", pool, ("cpu",), frozenset(models), 1)


def new_job(
    model: str = "flux-tiny",
    priority: Priority = Priority.STANDARD,
    tenant: str = "t1",
    steps: int = 4,
    width: int = 64,
    seed: int = 1,
    deadline: float | None = None,
    key: str = "",
    quota: TenantQuota | None = None,
) -> NewJob:
    params = GenerationParams(
        prompt="p", steps=steps, seed=seed, width=width, height=64, guidance_scale=3.5
    )
    return NewJob(
        tenant=tenant,
        model=model,
        priority=priority,
        params=params,
        deadline=deadline,
        idempotency_key=key,
        quota=quota or TenantQuota(),
    )


def submit_with_adapters(
    core: SchedulerCore, adapters: tuple[AdapterScale, ...] = (), **kwargs: object
) -> Job:
    """Submit a `new_job(**kwargs)` that names `adapters`; it must be accepted."""
    new = new_job(**kwargs)  # type: ignore[arg-type]
    new = dataclasses.replace(new, params=dataclasses.replace(new.params, adapters=adapters))
    outcome = core.submit(new)
    assert isinstance(outcome, Accepted), outcome
    return outcome.job


def roomy(worker_id: str) -> WorkerInfo:
    """A worker that takes two batches at once: it can carry load and still have room."""
    return dataclasses.replace(worker(worker_id), capacity=2)
