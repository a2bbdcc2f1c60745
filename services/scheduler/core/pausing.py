"""Step-boundary preemption: pausing lower-class work so that an urgent job starts now.

When no device has room and the job that a model's queue would run next belongs to a
higher class than every job of some running batch, and the cost model says that waiting for
a device to free up would make it miss its SLA (its queue's, or its class's own there:
`queues.<name>.class_sla_s`), the urgent batch goes to that
batch's worker with the order to pause it at its next step boundary (`Dispatch.pauses`).
The worker keeps the paused batch's state in memory and resumes it as soon as the urgent
batch ends; it also checkpoints it, so that it resumes elsewhere should the worker be lost.

Guards against thrash (`PausePolicy`): a job is paused at most `max_per_job` times, never
within its first `min_steps` steps, nor when the pause would make it miss its own deadline
(per the cost model), and a worker holds at most one paused batch. The
urgent batch goes without waiting for its batch window (static batching excepted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.backlog import Backlog
from mediamesh.scheduler.core.effects import Dispatch
from mediamesh.scheduler.core.inflight import InFlight, OpenBatch
from mediamesh.scheduler.core.job_table import JobTable
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.policy import PausePolicy, QueuePolicy
from mediamesh.scheduler.core.queues import ModelQueue
from mediamesh.scheduler.core.units import Placement, Unit

# Forms the urgent batch on `unit` from `queue`, only of classes above `above`, pausing the
# named batch; None when no such batch can go now (e.g. a static batch is not yet full).
FormUrgent = Callable[[Unit, ModelQueue, Priority, str, float], Dispatch | None]


class Pauser:
    """Decides which running batch to pause for which urgent job, and remembers the pairs."""

    def __init__(
        self,
        specs: Mapping[str, ModelSpec],
        policy: PausePolicy,
        queues: Mapping[str, QueuePolicy],
        table: JobTable,
        backlog: Backlog,
        inflight: InFlight,
        placements: Mapping[Priority, Placement],
    ) -> None:
        self._specs = specs
        self._placements = placements
        self._policy = policy
        self._queues = queues
        self._table = table
        self._backlog = backlog
        self._inflight = inflight
        # Urgent batch id -> the batch it paused, while the urgent one is open.
        self._paused_for: dict[str, str] = {}
        # Read-only outside this class: batches paused, by the class of the urgent job.
        self.pauses: dict[Priority, int] = dict.fromkeys(Priority, 0)
        # Job id -> the batch its worker said it paused in, until it says it resumed. The
        # worker's word, not `_paused_for`: a pause asked for happens only at the next step
        # boundary, and not at all when the batch ends or the worker declines first.
        self._halted: dict[str, str] = {}

    @property
    def enabled(self) -> bool:
        """Whether the policy allows any pause at all."""
        return self._policy.max_per_job > 0

    def plan(self, now: float, form: FormUrgent) -> list[Dispatch]:
        """Urgent batches to send now, each pausing a lower-class batch; see the module."""
        if not self.enabled or not self._backlog.has_queued():
            return []
        self._forget_ended()
        dispatched: list[Dispatch] = []
        for model in self._specs:
            queue = self._backlog.queue(model)
            if queue is None or not queue.depth:
                continue
            best = queue.best(now, _anyone)
            if best is None or best[1].priority is Priority.BATCH:
                continue  # nothing runs at a lower class than the lowest
            urgent = best[1]
            if not self._would_miss(urgent, self._slack_s(urgent, now), now):
                continue
            usable = [u for u in self._inflight.serving(model) if self._may_use(urgent, u)]
            victim = self._victim(usable, urgent, now)
            if victim is None:
                continue
            unit, batch = victim
            dispatch = form(
                unit, queue, _most_urgent_class(self._jobs_of(batch)), batch.batch_id, now
            )
            if dispatch is None:
                continue
            self._paused_for[dispatch.batch_id] = batch.batch_id
            for job in self._jobs_of(batch):
                job.pauses += 1
            self.pauses[urgent.priority] += 1
            dispatched.append(dispatch)
        return dispatched

    def job_paused(self, job_id: str, batch_id: str) -> None:
        """The worker paused `job_id` of `batch_id` at a step boundary (its notice)."""
        job = self._table.jobs.get(job_id)
        # A late notice of a batch the job has left since must not mark its new run.
        if job is not None and job.batch_id == batch_id:
            self._halted[job_id] = batch_id

    def job_resumed(self, job_id: str) -> None:
        """The worker resumed `job_id` where it paused (or from a checkpoint elsewhere)."""
        self._halted.pop(job_id, None)

    def is_paused(self, job: Job) -> bool:
        """Whether `job`'s batch is paused at a step boundary on its worker now."""
        # A job that ended, was requeued or moved to another batch while paused gets no
        # resume notice: its record then names a batch it is no longer running in.
        return (
            job.state is JobState.RUNNING
            and job.batch_id is not None
            and self._halted.get(job.job_id) == job.batch_id
        )

    def paused_count(self, queue: str) -> int:
        """Jobs of `queue` paused now; drops the records `is_paused` no longer honours."""
        jobs = self._table.jobs
        count = 0
        for job_id in list(self._halted):
            job = jobs.get(job_id)
            if job is None or not self.is_paused(job):
                del self._halted[job_id]
            elif job.queue == queue:
                count += 1
        return count

    def _forget_ended(self) -> None:
        batch = self._inflight.batch
        for urgent in [u for u, paused in self._paused_for.items() if batch(u) is None]:
            del self._paused_for[urgent]

    def _slack_s(self, job: Job, now: float) -> float:
        """Seconds the job may still wait and meet its SLA (its class's in its queue)."""
        queue = self._queues.get(job.queue)
        if queue is None:
            return float("inf")
        return queue.sla_for(job.priority) - (now - job.created_at) - job.cost_s

    def _may_use(self, job: Job, unit: Unit) -> bool:
        """Whether the placement of `job`'s class lets it run on `unit`'s pool at all."""
        placement = self._placements[job.priority]
        return unit.pool == placement.prefer or unit.pool in placement.allow

    def _would_miss(self, urgent: Job, slack_s: float, now: float) -> bool:
        """Whether no unit `urgent` may use could start a new batch of its model within
        `slack_s`, per the cost model (False when none serves it). Only units of the pools its
        class may use count: an idle spot worker is no help to a class kept off spot.
        Stops at the first that could: under load that is usually one of the first, so a
        pass does not walk every unit."""
        placement = self._placements[urgent.priority]
        serving = False
        for unit in self._inflight.units.values():
            if unit.draining or urgent.model not in unit.info.models:
                continue
            if not self._may_use(urgent, unit):
                continue
            serving = True
            # Off its preferred pool a job waits out its fallback first.
            fallback_s = 0.0
            if unit.pool != placement.prefer:
                fallback_s = max(urgent.enqueued_at + placement.fallback_after_s - now, 0.0)
            if unit.free_slots > 0 and fallback_s <= slack_s:
                return False
            # A unit takes new work once every batch on it has ended (a batch given ahead
            # runs after the one it waits on), and they run one at a time.
            busy_s = sum(self._remaining_s(b) for b in self._open_batches(unit))
            if max(busy_s, fallback_s) <= slack_s:
                return False
        return serving

    def _remaining_s(self, batch: OpenBatch) -> float:
        return sum(j.cost_s * j.remaining_fraction for j in self._jobs_of(batch))

    def _open_batches(self, unit: Unit) -> list[OpenBatch]:
        found = (self._inflight.batch(batch_id) for batch_id in unit.batches)
        return [batch for batch in found if batch is not None]

    def _jobs_of(self, batch: OpenBatch) -> list[Job]:
        jobs = self._table.jobs
        return [jobs[j] for j in batch.job_ids if j in jobs]

    def _victim(self, units: list[Unit], urgent: Job, now: float) -> tuple[Unit, OpenBatch] | None:
        """The batch to pause: lower class than `urgent` in every job, within the guards,
        on a worker that pauses nothing else yet; the one with the most work left."""
        involved = set(self._paused_for) | set(self._paused_for.values())
        found: tuple[float, Unit, OpenBatch] | None = None
        for unit in units:
            if unit.batches & involved:
                continue
            batch = self._set_back_on(unit, urgent, now)
            if batch is None:
                continue
            remaining = self._remaining_s(batch)
            if found is None or remaining > found[0]:
                found = (remaining, unit, batch)
        return None if found is None else (found[1], found[2])

    def _set_back_on(self, unit: Unit, urgent: Job, now: float) -> OpenBatch | None:
        """The batch of `unit` the urgent one may go before: the one computing there, paused
        at a step boundary; or, behind a batch that is finishing, the batch given ahead that
        has not started. The urgent batch then takes its place in line at no cost to its
        work; waiting for it to start and pass `min_steps` would hold the urgent job for the
        whole of the finishing batch's tail and the first steps besides.

        A batch past its last step only decodes and encodes its results, and the worker
        lets the next batch have the device while it encodes; so the batch to pause is the
        one computing beside it. Counting the finishing batch as a second running one left
        no candidate, and the urgent job waited for that stream to end and then for the
        other batch's first `min_steps`."""
        batches = self._open_batches(unit)
        computing = [b for b in batches if not self._denoised(b)]
        if len(computing) == 1:
            (batch,) = computing
            if len(batches) > 1 and not self._started(batch):
                return batch if self._passable(batch, urgent, now) else None
            return batch if self._pausable(batch, urgent, now) else None
        waiting = [b for b in computing if not self._started(b)]
        if len(computing) == 2 and len(waiting) == 1 and self._passable(waiting[0], urgent, now):
            return waiting[0]
        return None

    def _denoised(self, batch: OpenBatch) -> bool:
        """Whether every job of `batch` still open has run its last step (or none is left)."""
        return all(job.remaining_fraction == 0 for job in self._jobs_of(batch))

    def _started(self, batch: OpenBatch) -> bool:
        return any(j.state is not JobState.DISPATCHED for j in self._jobs_of(batch))

    def _passable(self, batch: OpenBatch, urgent: Job, now: float) -> bool:
        """Whether `urgent` may go before `batch`: the model's and the classes' conditions of
        a pause, but none about steps (enough for a batch that has not started); and no job
        of `batch` would then miss its own deadline, per the cost model. An accepted job
        with a deadline was taken on the promise of meeting it: a pause must not be what
        makes it expire."""
        if not self._may_set_back(batch, urgent):
            return False
        jobs = self._jobs_of(batch)
        ends = now + self._remaining_s(batch) + urgent.cost_s
        return bool(jobs) and all(
            job.priority > urgent.priority
            and job.pauses < self._policy.max_per_job
            and (job.deadline is None or ends <= job.deadline)
            for job in jobs
        )

    def _may_set_back(self, batch: OpenBatch, urgent: Job) -> bool:
        spec = self._specs.get(batch.model)
        if spec is None or spec.pipeline == "Echo" or spec.parallelism.mode != "data":
            return False  # no step boundaries to pause at, or a group that must pause as one
        # The step cache's hook state is per loop (worker.runtime._pausable).
        return not (batch.model == urgent.model and spec.cache is not None)

    def _pausable(self, batch: OpenBatch, urgent: Job, now: float) -> bool:
        """Whether the running `batch` may pause for `urgent`: passable, and every job past
        `min_steps` and short of its last step (which ends sooner than a pause would help)."""
        return self._passable(batch, urgent, now) and all(
            self._policy.min_steps <= job.step < (job.total_steps or job.params.steps) - 1
            for job in self._jobs_of(batch)
        )


def _anyone(job: Job) -> bool:
    return True


def _most_urgent_class(jobs: list[Job]) -> Priority:
    """The most urgent class among the paused batch's jobs: the urgent batch must beat it."""
    return min(job.priority for job in jobs)
