"""What a watcher of a job sees, and the hub that fans events out to watchers."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from dataclasses import dataclass

from mediamesh.common.work import Preview
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.store.artifacts import StoredArtifact


@dataclass(frozen=True)
class WatchEvent:
    job_id: str
    state: JobState
    # "queued", "progress", "result", "error" or "notice".
    kind: str
    position: int = 0
    eta_s: float | None = None  # queued events: None while no worker serves the model
    queue: str = ""
    step: int = 0
    total_steps: int = 0
    artifact: StoredArtifact | None = None
    code: str = ""
    message: str = ""
    notice: str = ""
    worker_id: str = ""
    attempt: int = 0
    # A progress event's latent preview; live only (a re-attached watcher gets none).
    preview: Preview | None = None

    @property
    def final(self) -> bool:
        return self.kind in ("result", "error")


def notice_event(job: Job, kind: str, message: str, worker_id: str | None = None) -> WatchEvent:
    """A notice about `job`, naming the run it belongs to (its worker, or `worker_id` when
    the job has already left it, and its attempt), whether the scheduler or a worker gave
    it."""
    return WatchEvent(
        job.job_id,
        job.state,
        "notice",
        notice=kind,
        message=message,
        worker_id=worker_id or job.worker_id or "",
        attempt=job.attempts,
    )


# Events a watcher may have waiting before its progress is coalesced.
WATCH_QUEUE_CAPACITY = 64
# Superseded by a later event of the same kind: the latest step, the latest queue position.
_COALESCIBLE = frozenset({"progress", "queued"})


class WatchQueue:
    """One watcher's pending events: never blocks the publisher, never grows without bound.

    Past `capacity`, the oldest waiting progress or queue-position event makes room: a
    later one of its kind says more. Notices and the final result or error are never
    dropped, and their number per job is bounded by its attempts, so the queue is too.
    """

    def __init__(self, capacity: int = WATCH_QUEUE_CAPACITY) -> None:
        self.capacity = capacity
        self._events: deque[WatchEvent] = deque()
        self._ready = asyncio.Event()
        # Events dropped because a later one superseded them.
        self.coalesced = 0

    def __len__(self) -> int:
        return len(self._events)

    def put_nowait(self, event: WatchEvent) -> None:
        """Queue `event`, first making room by coalescing when the queue is full."""
        if len(self._events) >= self.capacity and self._drop_oldest_coalescible():
            self.coalesced += 1
        self._events.append(event)
        self._ready.set()

    async def get(self) -> WatchEvent:
        """The next event, waiting for one."""
        while not self._events:
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()

    def _drop_oldest_coalescible(self) -> bool:
        for index, waiting in enumerate(self._events):
            if waiting.kind in _COALESCIBLE:
                del self._events[index]
                return True
        return False


class EventHub:
    """Per-job subscriber queues, bounded and coalescing: a slow watcher never stalls the
    scheduler, and never costs it unbounded memory."""

    def __init__(self, capacity: int = WATCH_QUEUE_CAPACITY) -> None:
        self._capacity = capacity
        self._subscribers: dict[str, set[WatchQueue]] = defaultdict(set)
        # Watchers that answer once: publishing skips them until the job's final event.
        self._final_only: dict[str, set[WatchQueue]] = defaultdict(set)

    def subscribe(self, job_id: str, *, final_only: bool = False) -> WatchQueue:
        """A queue of the job's events from now on; with `final_only`, of its last event."""
        queue = WatchQueue(self._capacity)
        subscribers = self._final_only if final_only else self._subscribers
        subscribers[job_id].add(queue)
        return queue

    def unsubscribe(self, job_id: str, queue: WatchQueue) -> None:
        for by_job in (self._subscribers, self._final_only):
            subscribers = by_job.get(job_id)
            if subscribers is not None:
                subscribers.discard(queue)
                if not subscribers:
                    del by_job[job_id]

    def publish(self, event: WatchEvent) -> None:
        for queue in self._subscribers.get(event.job_id, ()):
            queue.put_nowait(event)
        if event.final:
            for queue in self._final_only.get(event.job_id, ()):
                queue.put_nowait(event)
