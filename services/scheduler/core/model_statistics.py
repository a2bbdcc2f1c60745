"""Per-model inference statistics, as Triton's statistics extension reports them.

Counted by the scheduler, the one process that sees every job and every batch, since it
started (a restarted scheduler starts from zero, as a restarted Triton does). Kept per
tenant, so that a tenant's caller reads its own requests only, and for the whole mesh, read
by admin callers: a batch that mixes tenants is one execution of the model, and summing the
tenants' views would count it once per tenant.

The phases of a batch, from the scheduler's side of its stream (`BatchTimer`):
- input: from sending the batch to the start of its first denoising step (the trip to the
  worker, input decoding, prompt encoding);
- infer: the denoising steps, as the worker timed them (a paused batch's wait is not in it);
- output: from the last step's report to a result's arrival (decoding the latents, encoding
  the media, the trip back): per job to its own result, per batch to the last one.
A job resumed in a second batch takes part in two executions and is counted in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

_NS_PER_S = 1_000_000_000


@dataclass
class Duration:
    """How many times a phase happened and their total length."""

    count: int = 0
    ns: int = 0

    def add(self, seconds: float, times: int = 1) -> None:
        """`times` occurrences lasting `seconds` each (negative clock residue counts as 0)."""
        self.count += times
        self.ns += times * round(max(seconds, 0.0) * _NS_PER_S)


@dataclass
class BatchSizeStatistics:
    """The phases of the executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStatistics:
    """One model's counts since the scheduler started; the durations' counts are per job
    (per request, in Triton's words), `execution_count` and `batch_sizes` per batch."""

    # Wall-clock milliseconds since the epoch of the last execution's end; 0 before any.
    last_inference_ms: int = 0
    # Jobs that succeeded.
    inference_count: int = 0
    # Batches that ran (reached a step or a result).
    execution_count: int = 0
    # Acceptance to the end, of the jobs that succeeded and of those that did not.
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batch_sizes: dict[int, BatchSizeStatistics] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchTimes:
    """Seconds of each phase of one batch run."""

    input_s: float
    infer_s: float
    output_s: float


class RanJob(NamedTuple):
    """A job of a batch that ran: whose it is, how long it waited in its queue before the
    batch, and how long its result took after the last step (None: the batch brought back
    none, the job failed or was paused away)."""

    tenant: str
    wait_s: float
    output_s: float | None


class BatchTimer:
    """The phases of one batch run, from the arrival times of its events (monotonic
    seconds) and the steps' own lengths as the worker measured them."""

    def __init__(self, sent_at: float) -> None:
        self.sent_at = sent_at
        self._first_step_started: float | None = None
        self._last_step_at: float | None = None
        self._results: dict[str, float] = {}
        # Each step's length once: every job of the batch reports the same step.
        self._steps: dict[int, float] = {}
        self._stepped_s = 0.0

    def step(self, step: int, step_seconds: float, at: float) -> None:
        """A job of the batch finished `step`, reported at `at`."""
        self._last_step_at = at
        if step in self._steps:
            return
        self._steps[step] = step_seconds
        self._stepped_s += step_seconds
        # Reports travel in groups, so a step's may arrive with the next one's: each report
        # bounds the first step's start from above by the steps timed so far, and the
        # tightest bound keeps the input phase from overlapping the steps.
        started = at - self._stepped_s
        if self._first_step_started is None or started < self._first_step_started:
            self._first_step_started = started

    def result(self, job_id: str, at: float) -> None:
        """A job of the batch ended with its result, which arrived at `at`."""
        self._results.setdefault(job_id, at)

    def output_of(self, job_id: str) -> float | None:
        """Seconds from the batch's last step to the job's result; None without a result."""
        at = self._results.get(job_id)
        if at is None:
            return None
        # A model without steps (echo) spends it all in `infer`.
        return max(at - self._last_step_at, 0.0) if self._last_step_at is not None else 0.0

    def times(self) -> BatchTimes | None:
        """The batch's phases; None for a batch that never reached a step or a result."""
        last_result_at = max(self._results.values(), default=None)
        if self._first_step_started is None or self._last_step_at is None:
            if last_result_at is None:
                return None
            return BatchTimes(0.0, last_result_at - self.sent_at, 0.0)
        output_s = 0.0 if last_result_at is None else last_result_at - self._last_step_at
        return BatchTimes(
            input_s=max(self._first_step_started - self.sent_at, 0.0),
            infer_s=self._stepped_s,
            output_s=max(output_s, 0.0),
        )


class StatisticsLedger:
    """Every model's statistics, per tenant and for the whole mesh. `wall_clock`: seconds
    since the epoch, for `last_inference_ms`."""

    def __init__(self, wall_clock: Callable[[], float]) -> None:
        self.wall_clock = wall_clock
        self._mesh: dict[str, ModelStatistics] = {}
        self._tenants: dict[tuple[str, str], ModelStatistics] = {}

    def batch_ran(self, model: str, jobs: Sequence[RanJob], times: BatchTimes) -> None:
        """A batch of `model` ran these jobs in these phases."""
        # Truncated, so it never names a millisecond that has not begun.
        now_ms = int(self.wall_clock() * 1000)
        by_tenant: dict[str, list[RanJob]] = {}
        for job in jobs:
            by_tenant.setdefault(job.tenant, []).append(job)
        views = [(self._mesh_view(model), list(jobs))]
        views += [(self._tenant_view(tenant, model), own) for tenant, own in by_tenant.items()]
        for stats, counted in views:
            stats.last_inference_ms = now_ms
            stats.execution_count += 1
            for job in counted:
                stats.queue.add(job.wait_s)
                # Output is per result: a job that failed or was paused away made none.
                if job.output_s is not None:
                    stats.compute_output.add(job.output_s)
            stats.compute_input.add(times.input_s, len(counted))
            stats.compute_infer.add(times.infer_s, len(counted))
            sized = stats.batch_sizes.setdefault(len(jobs), BatchSizeStatistics())
            sized.compute_input.add(times.input_s)
            sized.compute_infer.add(times.infer_s)
            sized.compute_output.add(times.output_s)

    def job_ended(self, tenant: str, model: str, succeeded: bool, seconds: float) -> None:
        """A job of `model` ended, `seconds` after it was accepted. Any end but success
        counts in `fail`, a cancelled or expired job's too: Triton counts every request
        that did not succeed there, and KServe clients read it so."""
        for stats in (self._mesh_view(model), self._tenant_view(tenant, model)):
            if succeeded:
                stats.inference_count += 1
                stats.success.add(seconds)
            else:
                stats.fail.add(seconds)

    def statistics(self, model: str, tenant: str | None) -> ModelStatistics:
        """`model`'s statistics as `tenant` sees them (its own jobs), or the whole mesh's
        for None; zeros for a model nothing has run on."""
        if tenant is None:
            return self._mesh.get(model) or ModelStatistics()
        return self._tenants.get((tenant, model)) or ModelStatistics()

    def _mesh_view(self, model: str) -> ModelStatistics:
        stats = self._mesh.get(model)
        if stats is None:
            stats = self._mesh[model] = ModelStatistics()
        return stats

    def _tenant_view(self, tenant: str, model: str) -> ModelStatistics:
        stats = self._tenants.get((tenant, model))
        if stats is None:
            stats = self._tenants[(tenant, model)] = ModelStatistics()
        return stats
