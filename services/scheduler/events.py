"""What a watcher of a job sees, and the hub that fans events out to watchers."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.store.artifacts import StoredArtifact


@dataclass(frozen=True)
class WatchEvent:
    job_id: str
    state: JobState
    # "queued", "progress", "result", "error" or "notice".
    kind: str
    position: int = 0
    eta_s: float = 0.0
    queue: str = ""
    step: int = 0
    total_steps: int = 0
    artifact: StoredArtifact | None = None
    code: str = ""
    message: str = ""
    notice: str = ""
    worker_id: str = ""
    attempt: int = 0

    @property
    def final(self) -> bool:
        return self.kind in ("result", "error")


class EventHub:
    """Per-job subscriber queues; unbounded so a slow watcher never stalls the scheduler."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[WatchEvent]]] = defaultdict(set)

    def subscribe(self, job_id: str) -> asyncio.Queue[WatchEvent]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self._subscribers[job_id].add(queue)
        return queue

    def unsubscribe(self, job_id: str, queue: asyncio.Queue[WatchEvent]) -> None:
        subscribers = self._subscribers.get(job_id)
        if subscribers is not None:
            subscribers.discard(queue)
            if not subscribers:
                del self._subscribers[job_id]

    def publish(self, event: WatchEvent) -> None:
        for queue in self._subscribers.get(event.job_id, ()):
            queue.put_nowait(event)
