"""Admission: whether a new job may queue, and taking jobs back from the store on restart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from mediamesh.common.checkpoint_files import checkpoint_step
from mediamesh.common.denoising_steps import denoising_steps
from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import GenerationParams
from mediamesh.common.input_refs import without_inline_bytes
from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.backlog import Backlog
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.idempotency import conflict_message, conflicting_field
from mediamesh.scheduler.core.inflight import InFlight
from mediamesh.scheduler.core.interface import Accepted, NewJob, Rejection
from mediamesh.scheduler.core.job_table import JobTable
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.outbox import Outbox
from mediamesh.scheduler.core.policy import CorePolicy

# The request field a refusal for lack of time names: the job's own limit.
TIMEOUT_FIELD = "timeout_ms"


class Admission:
    """Checks a job against the registry, its queue's depth, its tenant's quota and its
    deadline, then queues it.

    Its own state is the id source and the jobs between `prepare` and `admit`: an owner that
    makes each job durable before it queues (the service's `Submissions`) awaits its store
    in that gap, and other submits are checked meanwhile. Those jobs are counted against the
    queue's depth limit and their tenant's queued limit as if queued, or concurrent submits
    would all pass the same check and overfill both. Otherwise it reads the backlog's and
    the units' counters and writes to the job table and the backlog.
    """

    def __init__(
        self,
        specs: Mapping[str, ModelSpec],
        policy: CorePolicy,
        cost: CostModel,
        clock: Callable[[], float],
        new_id: Callable[[], str],
        table: JobTable,
        backlog: Backlog,
        inflight: InFlight,
        outbox: Outbox,
    ) -> None:
        self._specs = specs
        self._policy = policy
        self._cost = cost
        self._clock = clock
        self._new_id = new_id
        self._table = table
        self._backlog = backlog
        self._inflight = inflight
        self._outbox = outbox
        self._models_of: dict[str, set[str]] = {}
        # Ids of the jobs `prepare` built and `admit` (or `release`) has not yet taken, and
        # their count per queue and per tenant.
        self._admitting: set[str] = set()
        self._admitting_in: Counter[str] = Counter()
        self._admitting_by: Counter[str] = Counter()
        for spec in specs.values():
            self._models_of.setdefault(spec.modality, set()).add(spec.name)

    def submit(self, new: NewJob) -> Accepted | Rejection:
        """Queue a new job, return the earlier one with its idempotency key, or say why not."""
        outcome = self.prepare(new)
        if isinstance(outcome, Rejection) or outcome.deduplicated:
            return outcome
        return self.admit(outcome.job)

    def prepare(self, new: NewJob) -> Accepted | Rejection:
        """Check a new job and build it without holding or queueing it (see `admit`); or
        return the earlier job with its idempotency key, or say why not. A job built here
        counts against its queue's and tenant's limits until `admit` or `release` takes it."""
        spec = self._specs.get(new.model)
        if spec is None:
            return Rejection(
                StatusCode.NOT_FOUND,
                f"model {new.model!r} is not in the registry",
                reason="unknown_model",
            )
        if new.idempotency_key:
            existing = self._table.by_key(new.tenant, new.idempotency_key)
            if existing is not None:
                if differing := conflicting_field(existing, new):
                    return Rejection(
                        StatusCode.INVALID_ARGUMENT,
                        conflict_message(existing, differing),
                        reason="idempotency_conflict",
                    )
                return Accepted(existing, deduplicated=True)
        queue = spec.modality
        policy = self._policy.queues.get(queue)
        if policy is None:
            return Rejection(
                StatusCode.FAILED_PRECONDITION,
                f"no queue is configured for {queue!r}",
                reason="no_queue",
            )
        backlog = self._backlog
        depth, admitting = backlog.queue_depth(queue), self._admitting_in[queue]
        if depth + admitting >= policy.max_depth:
            return Rejection(
                StatusCode.RESOURCE_EXHAUSTED,
                f"queue {queue!r} is full: {_counted(depth, admitting)}, "
                f"max_depth is {policy.max_depth}",
                self._retry_after(queue),
                reason="queue_full",
            )
        quota = new.quota
        if quota.max_queued:
            queued = backlog.queued_by_tenant(new.tenant)
            admitting = self._admitting_by[new.tenant]
            if queued + admitting >= quota.max_queued:
                return Rejection(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"max_queued_jobs: tenant {new.tenant!r} has {_counted(queued, admitting)}, "
                    f"the limit is {quota.max_queued}",
                    self._retry_after(queue),
                    reason="tenant_quota",
                )
        now = self._clock()
        cost = self._cost.estimate(new.model, new.params)
        if new.deadline is not None:
            left = max(new.deadline - now, 0.0)
            # A refusal relies on the least the job can take: the estimate may be high
            # for a size the mesh has not run yet, and only a longer timeout would help.
            least = self._cost.least_estimate(new.model, new.params)
            if least > left:
                # Not a matter of load: no retry with this timeout can succeed, so no hint.
                # The message starts with the field (TIMEOUT_FIELD) that callers branch on,
                # e.g. `mediamesh batch` to record the line at once instead of retrying it;
                # the gateway says instead when a call's gRPC deadline set the limit.
                return Rejection(
                    StatusCode.DEADLINE_EXCEEDED,
                    f"{TIMEOUT_FIELD}: {left:.3f} s left, and this job needs at least "
                    f"{least:.3f} s on a free device; give it more time",
                    reason="timeout_too_short",
                )
            eta = self.estimate_finish_s(new.model, new.priority, least)
            # No worker serves the model yet (a pool scaling from zero): nothing to judge by
            # beyond the job's own cost, checked above.
            if eta is not None and now + eta > new.deadline:
                return Rejection(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"{TIMEOUT_FIELD}: deadline cannot be met: estimated {eta:.1f} s to finish, "
                    f"{left:.1f} s left",
                    max(eta - left, 1.0),
                    reason="deadline_unmeetable",
                )
        job = Job(
            job_id=self._new_id(),
            tenant=new.tenant,
            model=new.model,
            queue=queue,
            priority=new.priority,
            params=new.params,
            created_at=now,
            deadline=new.deadline,
            idempotency_key=new.idempotency_key,
            quota=quota,
            cost_s=cost,
            enqueued_at=now,
            # The steps it will run, as its progress counts them: with an input image and
            # a strength below 1, the tail of its schedule; a client shows 0/3, not 0/4
            # and then 1/3.
            total_steps=_steps_run(spec, new.params),
            trace_carrier=dict(new.trace_carrier),
            delivery=new.delivery,
        )
        self._admitting.add(job.job_id)
        self._admitting_in[queue] += 1
        self._admitting_by[job.tenant] += 1
        return Accepted(job)

    def release(self, job: Job) -> None:
        """Stop counting a job `prepare` built that will not be admitted (its owner could not
        make it durable); nothing for a job not being admitted."""
        if job.job_id not in self._admitting:
            return
        self._admitting.remove(job.job_id)
        for counts, key in ((self._admitting_in, job.queue), (self._admitting_by, job.tenant)):
            counts[key] -= 1
            if not counts[key]:
                del counts[key]  # one key per tenant ever seen would only grow

    def admit(self, job: Job) -> Accepted:
        """Hold and queue a job that `prepare` built (once its owner has made it durable);
        the job already held under its idempotency key instead, if one came in between."""
        self.release(job)  # from here on it counts as queued, or not at all
        if job.idempotency_key:
            existing = self._table.by_key(job.tenant, job.idempotency_key)
            if existing is not None:
                return Accepted(existing, deduplicated=True)
        self._admit(job)
        self._outbox.transition(job, JobState.QUEUED)
        return Accepted(job)

    def restore(self, job: Job) -> None:
        """Take back a job from the store after a restart; unfinished ones queue again."""
        if job.state.terminal:
            # As when it ended here (see `JobLifecycle._finish`): its row keeps the inputs.
            job.params = without_inline_bytes(job.params)
            self._table.add(job)
            return
        job.cost_s = job.cost_s or self._cost.estimate(job.model, job.params)
        now = self._clock()
        if job.state.in_flight:
            # Its worker lost the batch with our connection; run it again, first in line.
            job.at_front = True
            job.enqueued_at = now
        else:
            # The store keeps no time of a requeue, so a queued job counts as waiting since
            # its acceptance: its wait and its aging carry across the restart. Never later
            # than now, or a clock set back would give it a negative wait.
            job.enqueued_at = min(job.created_at, now)
        job.state = JobState.QUEUED
        if job.checkpoint:
            job.checkpoint_step = _checkpoint_step(job)
        job.start_over()
        job.worker_id = job.batch_id = None
        self._admit(job)

    def _admit(self, job: Job) -> None:
        self._table.add(job)
        self._table.watch_deadline(job)
        self._backlog.add(job)
        self._inflight.watch_limit(job)

    def estimate_finish_s(self, model: str, priority: Priority, own_cost: float) -> float | None:
        """Seconds until a new job would finish: work ahead of it spread over its units;
        None while no unit serves the model, when the wait is a worker's start, which the
        cost model does not know (a job's own cost alone would promise it in a moment)."""
        units = self._inflight.serving(model)
        if not units:
            return None
        ahead = self._backlog.work_ahead_s(model, priority)
        busy = sum(u.load_s for u in units)
        return (ahead + busy) / len(units) + own_cost

    def _retry_after(self, queue: str) -> float:
        units = self._inflight.count_serving(self._models_of.get(queue, ()))
        depth = max(self._backlog.queue_depth(queue), 1)
        per_job = self._backlog.work_s[queue] / depth
        return max(per_job / max(units, 1), 1.0)


def _checkpoint_step(job: Job) -> int:
    """The step a restored job's checkpoint was saved after, which its next attempt starts
    from. The store keeps no such column, and the job's step as last written may be past
    the checkpoint (steps run after it); the checkpoint's name says its own step, as the
    worker wrote it. A name of another form leaves the step as written."""
    named = checkpoint_step(job.checkpoint or "")
    return job.step if named is None else named


def _counted(queued: int, admitting: int) -> str:
    """Jobs queued, and those being admitted when there are any."""
    if not admitting:
        return f"{queued} jobs queued"
    return f"{queued} jobs queued and {admitting} being admitted"


def _steps_run(spec: ModelSpec, params: GenerationParams) -> int:
    if params.image is None:
        return params.steps
    return denoising_steps(spec.pipeline, params.steps, params.strength)
