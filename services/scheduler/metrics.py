"""The scheduler's Prometheus metrics (documented in the README)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from mediamesh.scheduler.core.interface import REFUSAL_REASONS, SchedulingCore
from mediamesh.scheduler.core.jobs import JobState

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

QUEUE_DEPTH = Gauge("mediamesh_queue_depth", "Jobs queued.", ["queue", "priority"])
QUEUE_WORK = Gauge(
    "mediamesh_queue_work_seconds", "Estimated device-seconds of queued work.", ["queue"]
)
QUEUE_POOL_WORK = Gauge(
    "mediamesh_queue_pool_work_seconds",
    "Estimated device-seconds of queued work by the pool the jobs prefer.",
    ["queue", "pool"],
)
QUEUE_POOL_DEMAND = Gauge(
    "mediamesh_queue_pool_demand_seconds",
    "Estimated device-seconds of work queued for the pool (by preference) plus running on it "
    "(autoscaling metric).",
    ["queue", "pool"],
)
QUEUE_SLA = Gauge("mediamesh_queue_sla_seconds", "Latency objective of the queue.", ["queue"])
CLASS_SLA = Gauge(
    "mediamesh_queue_class_sla_seconds",
    "Latency objective of a priority class in the queue (the queue's unless set for the class).",
    ["queue", "priority"],
)
QUEUE_OLDEST = Gauge(
    "mediamesh_queue_oldest_wait_seconds", "Seconds the oldest queued job has waited.", ["queue"]
)
QUEUE_WAIT = Histogram(
    "mediamesh_queue_wait_seconds",
    "Time from entering the queue to dispatch.",
    ["queue", "priority"],
    buckets=_WAIT_BUCKETS,
)
JOB_LATENCY = Histogram(
    "mediamesh_job_latency_seconds",
    "Time from acceptance to the end of a job.",
    ["queue", "priority"],
    buckets=_WAIT_BUCKETS,
)
BATCH_SIZE = Histogram(
    "mediamesh_batch_size",
    "Jobs per dispatched batch.",
    ["model"],
    buckets=(1, 2, 3, 4, 6, 8, 16, 32),
)
# ACCEPTED counts acceptances; RECOVERED the unfinished jobs a restarted scheduler took back
# from its store, which this process then ends without having accepted them. Kept apart so
# that ACCEPTED stays a rate of new work, while ACCEPTED + RECOVERED - the ended states is
# what this process holds (it went negative after a restart with ACCEPTED alone).
JOBS = Counter(
    "mediamesh_jobs",
    "Jobs accepted, taken back from the store after a restart (RECOVERED), and ended, by state.",
    ["queue", "state"],
)
JOBS_DELETED = Counter(
    "mediamesh_jobs_deleted",
    "Ended jobs deleted by DeleteJob before their retention, with their results.",
    ["queue"],
)
JOBS_REFUSED = Counter(
    "mediamesh_jobs_refused",
    "New jobs refused at admission, by the check that refused them (a fixed set of reasons; "
    "`queue` is `unknown` for a model not in the registry).",
    ["queue", "reason"],
)
# The queue label of a refusal whose model names no queue.
UNKNOWN_QUEUE = "unknown"
DEVICE_LOAD = Gauge(
    "mediamesh_device_load",
    "Device-seconds of work dispatched or running on a worker's devices.",
    ["worker", "device"],
)
WORKERS = Gauge("mediamesh_workers", "Workers by pool and state.", ["pool", "state"])
PREEMPTIONS = Counter("mediamesh_preemptions", "Jobs checkpointed off a draining worker.", ["pool"])
PAUSES = Counter(
    "mediamesh_pauses",
    "Jobs whose batch paused at a step boundary for more urgent work, by the paused job's class.",
    ["priority"],
)
SPOT_FALLBACKS = Counter(
    "mediamesh_spot_fallbacks", "Jobs that preferred spot but ran on-demand.", ["queue"]
)
DEVICE_SECONDS = Counter(
    "mediamesh_device_seconds", "Measured device-seconds of denoising.", ["pool", "model"]
)
COST = Counter("mediamesh_cost", "Money spent at each pool's price per device-hour.", ["pool"])
STORE_WRITE_FAILURES = Counter(
    "mediamesh_store_write_failures",
    "Job store writes that failed: `insert` (a Submit answered UNAVAILABLE) or `transition` "
    "(a state change, retried until it lands).",
    ["op"],
)
RESULT_STORE_FALLBACKS = Counter(
    "mediamesh_result_store_fallbacks",
    "Results the artifact backend could not take (an unreachable bucket or a full disk), "
    "kept in the job store instead.",
)
RESULT_WRITE_FAILURES = Counter(
    "mediamesh_result_write_failures",
    "Results no store could keep: each failed its job UNAVAILABLE.",
)
WEBHOOK_ATTEMPTS = Counter(
    "mediamesh_webhook_attempts",
    "Webhook delivery attempts by outcome: `delivered` (a 2xx answer), `retry` (failed, to be "
    "tried again) or `given_up` (failed for the last time).",
    ["outcome"],
)
STORE_PENDING_WRITES = Gauge(
    "mediamesh_store_pending_writes", "Jobs whose latest state is not yet in the job store."
)
ENDED_JOBS_IN_MEMORY = Gauge(
    "mediamesh_ended_jobs_in_memory",
    "Ended jobs held in memory whose ends are stored: at most "
    "scheduler.ended_jobs_in_memory; older ones are read back from the job store.",
)
ON_DEMAND_COST = Gauge(
    "mediamesh_on_demand_equivalent_cost",
    "What the device-seconds so far would have cost all on on-demand.",
)


def declare_series(queues: list[str]) -> None:
    """Create every label set at 0, so the first event shows in rate() and increase()."""
    for queue in queues:
        for state in ("ACCEPTED", "RECOVERED", *(end for end in JobState if end.terminal)):
            JOBS.labels(queue, state)
        SPOT_FALLBACKS.labels(queue)
        JOBS_DELETED.labels(queue)
        for reason in REFUSAL_REASONS:
            JOBS_REFUSED.labels(queue, reason)
    # A model not in the registry names no queue.
    JOBS_REFUSED.labels(UNKNOWN_QUEUE, "unknown_model")
    for priority in ("REALTIME", "STANDARD", "BATCH"):
        PAUSES.labels(priority)
    for pool in ("on-demand", "spot"):
        PREEMPTIONS.labels(pool)
        COST.labels(pool)
    for op in ("insert", "transition"):
        STORE_WRITE_FAILURES.labels(op)
    for outcome in ("delivered", "retry", "given_up"):
        WEBHOOK_ATTEMPTS.labels(outcome)


def forget_worker(worker_id: str, devices: Iterable[str]) -> None:
    """Drop a departed worker's series: a gauge left behind would report load on devices
    that are gone, and every worker that ever came and went would stay in /metrics."""
    for device in devices:
        DEVICE_LOAD.remove(worker_id, device)


# Below this, a sum of seconds is float residue, not work.
_RESIDUE_S = 1e-9


def _settled(seconds: float) -> float:
    """`seconds`, or 0 when it is what is left of adding and taking away the same work:
    the core keeps running sums, and a drained queue read 2.66e-15 (or a tiny negative),
    which dashboards and KEDA show as work that is not there."""
    return 0.0 if abs(seconds) < _RESIDUE_S else seconds


def publish_gauges(core: SchedulingCore, queues: list[str]) -> None:
    """Set every gauge from the core's incremental counters (cheap: no job is scanned)."""
    for (queue, priority), depth in core.depth.items():
        QUEUE_DEPTH.labels(queue, priority.name).set(depth)
    for queue in queues:
        QUEUE_WORK.labels(queue).set(_settled(core.work_s[queue]))
        QUEUE_OLDEST.labels(queue).set(core.oldest_wait_s(queue))
        for pool in ("on-demand", "spot"):
            QUEUE_POOL_WORK.labels(queue, pool).set(_settled(core.pool_work_s[(queue, pool)]))
            QUEUE_POOL_DEMAND.labels(queue, pool).set(_settled(core.pool_demand_s(queue, pool)))
    states: dict[tuple[str, str], int] = {
        (p, s): 0 for p in ("on-demand", "spot") for s in ("ready", "busy", "draining")
    }
    for unit in core.units.values():
        states[(unit.pool, unit.state)] = states.get((unit.pool, unit.state), 0) + 1
        for device in unit.info.devices:
            DEVICE_LOAD.labels(unit.worker_id, device).set(_settled(unit.load_s))
    for (pool, state), count in states.items():
        WORKERS.labels(pool, state).set(count)
    ON_DEMAND_COST.set(core.ledger.on_demand_cost())
