"""Queue accounting: every queued job, in its model's queue, and counters kept as they move.

The counters are incremental, so metrics, admission and autoscaling read them without ever
scanning the queued jobs.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.jobs import Job, JobState, Priority
from mediamesh.scheduler.core.queues import ModelQueue
from mediamesh.scheduler.core.units import Placement

_PRIORITIES = tuple(Priority)


class Backlog:
    """The queued jobs of every model, with depth and work counted per queue, class and pool."""

    def __init__(
        self,
        specs: Iterable[ModelSpec],
        placements: Mapping[Priority, Placement],
        aging_s_per_class: float,
        views: Collection[frozenset[Priority]],
    ) -> None:
        specs = list(specs)
        self._placements = placements
        self._modality = {s.name: s.modality for s in specs}
        self._queues = {s.name: ModelQueue(s.name, aging_s_per_class, views) for s in specs}
        # Read-only outside this class.
        self.depth: dict[tuple[str, Priority], int] = defaultdict(int)
        self.work_s: dict[str, float] = defaultdict(float)
        self.pool_work_s: dict[tuple[str, str], float] = defaultdict(float)
        self._queue_depth: dict[str, int] = defaultdict(int)
        self._model_depth: dict[tuple[str, Priority], int] = defaultdict(int)
        self._model_work: dict[tuple[str, Priority], float] = defaultdict(float)
        self._model_front: dict[str, int] = defaultdict(int)
        self._queued_by_tenant: dict[str, int] = defaultdict(int)
        # Each queued job's arrival number, and per model and class those numbers in order
        # (appended as they grow, so always sorted): a job's place in its class's line.
        self._arrivals = itertools.count()
        self._arrival_of: dict[str, int] = {}
        self._class_line: dict[tuple[str, Priority], list[int]] = defaultdict(list)

    def add(self, job: Job) -> None:
        """Queue a job (new, restored or sent back) in its model's queue."""
        job.state = JobState.QUEUED
        self._queues[job.model].add(job)
        work = job.cost_s * job.remaining_fraction
        self.depth[(job.queue, job.priority)] += 1
        self._queue_depth[job.queue] += 1
        self._model_depth[(job.model, job.priority)] += 1
        self._model_work[(job.model, job.priority)] += work
        self._model_front[job.model] += job.at_front
        self.work_s[job.queue] += work
        self.pool_work_s[(job.queue, self._placements[job.priority].prefer)] += work
        self._queued_by_tenant[job.tenant] += 1
        if not job.at_front:  # counted among the front's instead
            arrival = self._arrival_of[job.job_id] = next(self._arrivals)
            self._class_line[(job.model, job.priority)].append(arrival)

    def remove(self, job: Job) -> None:
        """Take a queued job out of line (cancelled, expired or dispatched)."""
        self._queues[job.model].remove(job)
        work = job.cost_s * job.remaining_fraction
        self.depth[(job.queue, job.priority)] -= 1
        self._queue_depth[job.queue] -= 1
        self._model_depth[(job.model, job.priority)] -= 1
        key = (job.model, job.priority)
        self._model_work[key] = max(self._model_work[key] - work, 0.0)
        self._model_front[job.model] -= job.at_front
        self.work_s[job.queue] = max(self.work_s[job.queue] - work, 0.0)
        pool_key = (job.queue, self._placements[job.priority].prefer)
        self.pool_work_s[pool_key] = max(self.pool_work_s[pool_key] - work, 0.0)
        self._queued_by_tenant[job.tenant] -= 1
        arrival = self._arrival_of.pop(job.job_id, None)
        if arrival is not None:
            line = self._class_line[(job.model, job.priority)]
            at = bisect.bisect_left(line, arrival)
            if at < len(line) and line[at] == arrival:
                del line[at]

    def take(self, job: Job) -> None:
        """Take a job out of line to run it, charging its tenant's fair share."""
        self.remove(job)
        self._queues[job.model].charge(job)

    def queue(self, model: str) -> ModelQueue | None:
        """A model's queue, for forming batches from it (None for a model not registered)."""
        return self._queues.get(model)

    def has_queued(self) -> bool:
        """Whether any job is queued at all."""
        return any(self._queue_depth.values())

    def queue_depth(self, queue: str) -> int:
        """Jobs queued in a queue (a modality)."""
        return self._queue_depth[queue]

    def queued_by_tenant(self, tenant: str) -> int:
        """Jobs a tenant has queued, over every queue."""
        return self._queued_by_tenant[tenant]

    def work_ahead_s(self, model: str, priority: Priority) -> float:
        """Device-seconds of a model's queued work in `priority`'s class or above."""
        return sum(self._model_work[(model, p)] for p in _PRIORITIES if p <= priority)

    def position(self, job: Job) -> int:
        """Jobs of the same model ahead of `job` (0 = next), by class and arrival: those sent
        back to the front, those of higher classes, and those of its class that came before
        it (not after: a later job is no more ahead of it than it was when it came). Exact
        until aging and fair share reorder the line, when it is an estimate."""
        if job.state is not JobState.QUEUED:
            return 0
        front = self._model_front[job.model]
        if job.at_front:
            return max(front - 1, 0)
        better = sum(self._model_depth[(job.model, p)] for p in _PRIORITIES if p < job.priority)
        arrival = self._arrival_of.get(job.job_id)
        line = self._class_line[(job.model, job.priority)]
        earlier = len(line) - 1 if arrival is None else bisect.bisect_left(line, arrival)
        return front + better + earlier

    def oldest_wait_s(self, queue: str, now: float) -> float:
        """Seconds the longest-waiting job of a queue has waited (0 when it is empty)."""
        oldest = [
            at
            for model, q in self._queues.items()
            if q.depth
            and self._modality[model] == queue
            and (at := q.oldest_enqueued_at()) is not None
        ]
        return now - min(oldest) if oldest else 0.0

    def queued_jobs(self, model: str) -> list[Job]:
        """A model's queued jobs, in no particular order."""
        return list(self._queues[model].jobs())
