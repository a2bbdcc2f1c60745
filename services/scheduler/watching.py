"""Watchers of jobs: what each is told first, and queue positions told again as they move.

Events fan out through the `EventHub`; this adds what depends on the job rather than on
the event: the snapshot a new watcher starts from, the queued event's position and ETA, and
for watched queued jobs a lower position once jobs ahead of them have left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from mediamesh.scheduler.core.interface import SchedulingCore
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.events import EventHub, WatchEvent, notice_event
from mediamesh.scheduler.store.artifacts import StoredArtifact

log = logging.getLogger("mediamesh.scheduler")

# How often a watched queued job is told its position again when it has moved up: at most
# once a second per job, and only for jobs someone watches, so a deep queue costs nothing.
QUEUE_POSITION_REFRESH_S = 1.0


class JobWatchers:
    def __init__(
        self, core: SchedulingCore, hub: EventHub, results: dict[str, StoredArtifact]
    ) -> None:
        self.core = core
        self.hub = hub
        # Results of ended jobs held in memory (the runtime's, shared).
        self.results = results
        # Jobs with watchers that see every event -> how many; and for each, the highest
        # queue position a watcher of it was last told (a later, lower one is sent on).
        self._watchers: dict[str, int] = {}
        self._told_position: dict[str, int] = {}

    async def follow(
        self,
        job: Job,
        artifact: StoredArtifact | None,
        *,
        final_only: bool = False,
        snapshot_first: bool = False,
    ) -> AsyncGenerator[WatchEvent, None]:
        """The job's current state, then its events to its end; with `final_only` its final
        event alone, or the current state and the final event with `snapshot_first` (a
        caller that submitted in the same call learns the job's id from it)."""
        job_id = job.job_id
        queue = self.hub.subscribe(job_id, final_only=final_only)
        snapshot: WatchEvent | None = None
        try:
            # Decide from the snapshot, not the job: it may end while the snapshot is sent,
            # and its final event must then still come through the queue.
            snapshot = self.snapshot_event(job, artifact)
            if not final_only:
                self._watching(job_id, snapshot)
            if snapshot.final or not final_only or snapshot_first:
                yield snapshot
            if snapshot.final:
                return
            if not final_only and self.core.is_paused(job):
                # Its `paused` notice went out before this watcher came: without one, a
                # RUNNING job that does not move reads as stuck until an unexplained
                # `resumed`.
                yield notice_event(
                    job, "paused", f"paused after step {job.step} for more urgent work"
                )
            while True:
                event = await queue.get()
                yield event
                if event.final:
                    return
        finally:
            self.hub.unsubscribe(job_id, queue)
            if snapshot is not None and not final_only:
                self._watching(job_id, None)

    def snapshot_event(self, job: Job, artifact: StoredArtifact | None = None) -> WatchEvent:
        if job.state.terminal:
            return self.final_event(job, artifact)
        if job.state is JobState.QUEUED:
            return self.queued_event(job)
        # A dispatched job has run no step of this attempt yet: its step is where the
        # attempt starts (a checkpoint's), and a progress event for it would be told again
        # once the attempt reaches it.
        if job.state is JobState.DISPATCHED:
            return WatchEvent(
                job.job_id,
                job.state,
                "notice",
                notice="dispatched",
                message=f"dispatched to {job.worker_id} (attempt {job.attempts})",
                worker_id=job.worker_id or "",
                attempt=job.attempts,
            )
        return WatchEvent(
            job.job_id,
            job.state,
            "progress",
            step=job.step,
            total_steps=job.total_steps or job.params.steps,
            attempt=job.attempts,
        )

    def queued_event(self, job: Job) -> WatchEvent:
        position = self.core.queue_position(job)
        eta = self.core.estimate_finish_s(job.model, job.priority, job.cost_s)
        return WatchEvent(
            job.job_id, JobState.QUEUED, "queued", position=position, eta_s=eta, queue=job.queue
        )

    def final_event(self, job: Job, artifact: StoredArtifact | None = None) -> WatchEvent:
        """The ended job's last event; `artifact` is its result when it is not in memory."""
        if job.state is JobState.SUCCEEDED:
            return WatchEvent(
                job.job_id, job.state, "result", artifact=artifact or self.results.get(job.job_id)
            )
        return WatchEvent(
            job.job_id, job.state, "error", code=job.error_code, message=job.error_message
        )

    async def refresh_positions(self) -> None:
        """Tells the watchers of a queued job its position again once jobs ahead have left.

        A `queued` event is published when a job enters the queue; without more, a watcher
        saw that first position and ETA until dispatch. Only watched jobs are looked at, at
        most once per QUEUE_POSITION_REFRESH_S, and only a lower position is sent: the
        position is an estimate from the queue's depths (`Backlog.position`), which jobs
        arriving behind this one would raise."""
        while True:
            await asyncio.sleep(QUEUE_POSITION_REFRESH_S)
            try:
                self._publish_moved_positions()
            except Exception:
                log.exception("refreshing queue positions failed; trying again")

    def _publish_moved_positions(self) -> None:
        for job_id in list(self._watchers):
            job = self.core.jobs.get(job_id)
            if job is None or job.state is not JobState.QUEUED:
                self._told_position.pop(job_id, None)
                continue
            told = self._told_position.get(job_id)
            if told is not None and self.core.queue_position(job) < told:
                self.publish_queued(job)

    def publish_queued(self, job: Job) -> None:
        event = self.queued_event(job)
        if job.job_id in self._watchers:
            self._told_position[job.job_id] = event.position
        self.hub.publish(event)

    def _watching(self, job_id: str, snapshot: WatchEvent | None) -> None:
        """A watcher of every event of `job_id` starts (with its first event) or, with
        None, stops."""
        if snapshot is None:
            left = self._watchers.get(job_id, 0) - 1
            if left > 0:
                self._watchers[job_id] = left
            else:
                self._watchers.pop(job_id, None)
                self._told_position.pop(job_id, None)
            return
        self._watchers[job_id] = self._watchers.get(job_id, 0) + 1
        if snapshot.kind == "queued":
            told = self._told_position.get(job_id, snapshot.position)
            self._told_position[job_id] = max(told, snapshot.position)
