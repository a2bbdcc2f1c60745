"""The one interface the scheduler's owners drive: the service's runtime and the simulator.

Both depend on `SchedulingCore`, never on the class that implements it (`SchedulerCore`,
scheduler.py), so the policy can be recomposed without touching either. Every call returns
at once and is plain Python; what must happen outside is queued as effects for the owner to
take with `take_effects()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mediamesh.common.errors import StatusCode
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import Preview
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.delivery import ResultDelivery
from mediamesh.scheduler.core.effects import Dispatch, Effect
from mediamesh.scheduler.core.jobs import GenerationParams, Job, JobState, Priority, TenantQuota
from mediamesh.scheduler.core.ledger import CostLedger
from mediamesh.scheduler.core.policy import CorePolicy
from mediamesh.scheduler.core.units import Unit, WorkerInfo


@dataclass(frozen=True)
class NewJob:
    """A request to run one job, as the API layer hands it to the core."""

    tenant: str
    model: str
    priority: Priority
    params: GenerationParams
    deadline: float | None = None
    idempotency_key: str = ""
    quota: TenantQuota = field(default_factory=TenantQuota)
    trace_carrier: dict[str, str] = field(default_factory=dict)
    delivery: ResultDelivery = field(default_factory=ResultDelivery)
    # The request named no seed (the mesh chose one): a retry of it matches a job of any seed.
    any_seed: bool = False


@dataclass(frozen=True)
class Rejection:
    """A job the core would not take, and when trying again may help."""

    code: StatusCode
    message: str
    retry_after_s: float = 0.0
    # Which check refused it, one of REFUSAL_REASONS: a metric label, so never a tenant or
    # model name (the message has those).
    reason: str = "other"


# Why a new job is refused, fixed so that a metric labelled by them stays small: those a
# Rejection gives, STORE_UNAVAILABLE, which the service adds when its store fails, and
# INVALID_REQUEST, for a request its checks refuse before admission.
STORE_UNAVAILABLE = "store_unavailable"
INVALID_REQUEST = "invalid_request"
# The tenant holds its quota of stored results (scheduler/result_usage.py).
RESULT_QUOTA = "result_quota"
REFUSAL_REASONS = (
    "unknown_model",
    "idempotency_conflict",
    "no_queue",
    "queue_full",
    "tenant_quota",
    "timeout_too_short",
    "deadline_unmeetable",
    STORE_UNAVAILABLE,
    RESULT_QUOTA,
    # Refused by the request checks before admission (a value past the model's limits, an
    # unknown upload, a webhook the policy refuses): a caller's mistake.
    INVALID_REQUEST,
    "other",
)


@dataclass(frozen=True)
class Accepted:
    """A job the core holds; `deduplicated` when it is an earlier job with the same key."""

    job: Job
    deduplicated: bool = False


class SchedulingCore(Protocol):
    """Queues, batching, routing and job lifecycle, driven by one owner with a clock.

    The read-only views below are live: they change as calls are made, and the owner must
    not change them.
    """

    @property
    def specs(self) -> Mapping[str, ModelSpec]:
        """The registry's models by name."""
        ...

    @property
    def policy(self) -> CorePolicy:
        """The policy the core was built with."""
        ...

    @property
    def cost(self) -> CostModel:
        """Device-seconds estimates, calibrated by reported step times."""
        ...

    @property
    def ledger(self) -> CostLedger:
        """Device-seconds spent, by pool, model and tenant."""
        ...

    @property
    def jobs(self) -> Mapping[str, Job]:
        """Every job held in memory (finished ones until `forget`), by id."""
        ...

    @property
    def units(self) -> Mapping[str, Unit]:
        """Every registered worker's routing unit, by worker id."""
        ...

    @property
    def depth(self) -> Mapping[tuple[str, Priority], int]:
        """Jobs queued, per (queue, priority)."""
        ...

    @property
    def running(self) -> Mapping[str, int]:
        """Jobs dispatched and not yet ended, per queue."""
        ...

    @property
    def work_s(self) -> Mapping[str, float]:
        """Estimated device-seconds queued, per queue."""
        ...

    @property
    def pool_work_s(self) -> Mapping[tuple[str, str], float]:
        """Estimated device-seconds queued, per (queue, preferred pool)."""
        ...

    @property
    def pool_running_s(self) -> Mapping[tuple[str, str], float]:
        """Estimated device-seconds dispatched and not yet ended, per (queue, pool)."""
        ...

    @property
    def ended(self) -> Mapping[tuple[str, JobState], int]:
        """Jobs that reached a terminal state, per (queue, state)."""
        ...

    @property
    def preemptions(self) -> Mapping[str, int]:
        """Jobs preempted, per pool."""
        ...

    @property
    def spot_fallbacks(self) -> Mapping[str, int]:
        """Spot-preferring jobs that ran on on-demand after waiting, per queue."""
        ...

    @property
    def pauses(self) -> Mapping[Priority, int]:
        """Running batches asked to pause at a step boundary, per class of the urgent job."""
        ...

    def take_effects(self) -> list[Effect]:
        """Everything the owner must carry out since the last call, in order."""
        ...

    # ---- jobs ----------------------------------------------------------------------------

    def submit(self, new: NewJob) -> Accepted | Rejection:
        """Accept a job into its queue, or say why not."""
        ...

    def prepare(self, new: NewJob) -> Accepted | Rejection:
        """`submit` in two steps, for an owner that must persist a job before it queues:
        check and build the job without holding it (or find the earlier job with its
        idempotency key, or say why not). Until `admit` or `release` the job only counts
        against its queue's depth limit and its tenant's queued limit, so that submits
        checked while it is being persisted cannot overfill them."""
        ...

    def admit(self, job: Job) -> Accepted:
        """Hold and queue a job from `prepare`; if another job took its idempotency key in
        between, that one, deduplicated, and this one is dropped."""
        ...

    def release(self, job: Job) -> None:
        """Give up a job from `prepare` that will not be admitted (it could not be
        persisted): it no longer counts against any limit."""
        ...

    def restore(self, job: Job) -> None:
        """Take back a job from the store after a restart; unfinished ones queue again."""
        ...

    def cancel(self, job_id: str) -> Job | None:
        """Stop a job wherever it is; None when unknown, the job as it stands otherwise."""
        ...

    def expire_due(self) -> list[Job]:
        """End every job whose deadline has passed; returns them."""
        ...

    def forget(self, job_id: str) -> None:
        """Drop a finished job from memory (the store keeps it for its retention)."""
        ...

    def queue_position(self, job: Job) -> int:
        """Jobs of the same model ahead of `job` (0 = next)."""
        ...

    def estimate_finish_s(self, model: str, priority: Priority, own_cost: float) -> float | None:
        """Seconds until a new job would finish: work ahead of it spread over its units;
        None while no unit serves the model."""
        ...

    # ---- dispatch ------------------------------------------------------------------------

    def schedule(self) -> list[Dispatch]:
        """Form and route every batch that can go now."""
        ...

    def next_wakeup(self) -> float | None:
        """Earliest time at which a timer (batch window, fallback, deadline) may change things."""
        ...

    # ---- workers -------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        """A worker joined (or rejoined: its earlier self is given up on first)."""
        ...

    def heartbeat(self, worker_id: str, draining: bool = False) -> None:
        """A worker is alive; `draining` when it takes no new batches."""
        ...

    def adapters_loaded(self, worker_id: str, loaded: Mapping[str, Mapping[str, float]]) -> None:
        """A worker's LoRA adapters loaded now, per model, with the seconds each load took."""
        ...

    def models_resident(self, worker_id: str, report: Mapping[str, tuple[bool, float]]) -> None:
        """A worker's residency: per hosted model, (loaded now, seconds its last load took)."""
        ...

    def check_liveness(self) -> list[str]:
        """Give up on workers whose heartbeats stopped; returns their ids."""
        ...

    def worker_lost(self, worker_id: str, reason: str) -> None:
        """A worker is gone; its batches' jobs go back in line or fail."""
        ...

    # ---- reports from workers ------------------------------------------------------------

    def batch_fitted(self, job_id: str, fitted: int) -> bool:
        """The job's batch ran out of memory and runs again in batches of at most `fitted`;
        True when that lowered the batch ceiling of its model and shape."""
        ...

    def job_progress(
        self,
        job_id: str,
        batch_id: str,
        step: int,
        total_steps: int,
        step_seconds: float = 0.0,
        preview: Preview | None = None,
    ) -> None:
        """A job of a batch finished a step."""
        ...

    def job_succeeded(self, job_id: str, batch_id: str) -> Job | None:
        """A job of a batch produced its result; None when the report is stale."""
        ...

    def job_failed(self, job_id: str, batch_id: str, code: str, message: str) -> None:
        """A job of a batch failed (or was cancelled, code CANCELLED) on its worker."""
        ...

    def job_preempted(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> bool:
        """A job of a batch stopped at `step` and saved `checkpoint`; it goes back first in
        line. Whether it had run: one handed back unstarted is no preemption."""
        ...

    def job_checkpointed(self, job_id: str, batch_id: str, checkpoint: str, step: int) -> None:
        """A running job saved a checkpoint it can resume from."""
        ...

    def job_paused(self, job_id: str, batch_id: str) -> None:
        """A job of a batch paused at a step boundary for more urgent work."""
        ...

    def job_resumed(self, job_id: str) -> None:
        """A job resumed on its worker after a pause, or from a checkpoint."""
        ...

    def batch_size(self, batch_id: str) -> int:
        """Jobs the batch was dispatched with (1 when unknown)."""
        ...

    def batch_ended(self, batch_id: str) -> None:
        """The worker's stream for this batch closed."""
        ...

    def batch_undelivered(self, batch_id: str, reason: str) -> None:
        """The worker never took the batch."""
        ...

    # ---- views ---------------------------------------------------------------------------

    def queue_depth(self, queue: str) -> int:
        """Jobs queued in a queue (a modality)."""
        ...

    def pool_demand_s(self, queue: str, pool: str) -> float:
        """Device-seconds a pool is asked for: queued work preferring it plus work on it."""
        ...

    def oldest_wait_s(self, queue: str) -> float:
        """Seconds the longest-waiting job of a queue has waited."""
        ...

    def queued_jobs(self, model: str) -> list[Job]:
        """A model's queued jobs, in no particular order."""
        ...

    def is_paused(self, job: Job) -> bool:
        """Whether the job's batch is paused at a step boundary on its worker now."""
        ...

    def paused_count(self, queue: str) -> int:
        """Jobs of a queue whose batch is paused at a step boundary now (counted in
        `running` too)."""
        ...


# How an owner that runs its own clock (the simulator) builds a core: from the registry's
# models, the policy, the clock and a source of job ids.
CoreFactory = Callable[
    [list[ModelSpec], CorePolicy, Callable[[], float], Callable[[], str]], SchedulingCore
]
