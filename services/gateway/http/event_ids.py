"""Server-sent event ids that any gateway replica can resume from.

An id is a position in a job's life, `<attempt>.<step>.<rank>` (rank orders what happens at
one step: 0 queued, 2 progress, 3 a notice), or `end` for the result or error. It is computed
from the events themselves, never from a counter of one connection, so a reconnect with
`Last-Event-ID` to another replica resumes at the same place.

A Watch starts with one snapshot event (the job's current state) and then relays live
events. On resume the snapshot is dropped when it is not past the client's last id (the
client has seen it, or something later), unless it says the job is queued again after the
client last saw it run a step, and every live event is sent. Ids only grow: an
event whose natural position is not past the last id sent (a queue position after a retry,
a second notice at one step) takes the next rank after it.

Pure: plain dicts in, strings out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FINAL_ID = "end"
RANK_QUEUED, RANK_PROGRESS, RANK_NOTICE = 0, 2, 3
# Larger than any attempt, so the final event sorts after every other.
_FINAL_ATTEMPT = 2**62


@dataclass(frozen=True, order=True)
class EventKey:
    """A point in a job's life; ids compare as these keys do."""

    attempt: int
    step: int
    rank: int

    @property
    def final(self) -> bool:
        """Whether this is the job's last event (its result or error)."""
        return self.attempt == _FINAL_ATTEMPT

    def text(self) -> str:
        """The SSE `id:` value."""
        return FINAL_ID if self.final else f"{self.attempt}.{self.step}.{self.rank}"


FINAL = EventKey(_FINAL_ATTEMPT, 0, 0)


def parse_event_id(text: str) -> EventKey:
    """The key of an id this module made; ValueError for anything else."""
    if text == FINAL_ID:
        return FINAL
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 18 for p in parts):
        raise ValueError(f"{text[:64]!r} is not an event id (expected A.S.R or {FINAL_ID!r})")
    attempt, step, rank = (int(p) for p in parts)
    return EventKey(attempt, step, rank)


class EventIds:
    """Assigns ids to one stream's events, dropping the replayed snapshot on a resume."""

    def __init__(self, resume: EventKey | None = None) -> None:
        self.last = resume
        self._replaying = resume is not None
        self._attempt = resume.attempt if resume and not resume.final else 0
        self._step = resume.step if resume and not resume.final else 0

    def assign(self, event: dict[str, Any]) -> str | None:
        """The id for `event` (an `event_view` dict), or None when it must not be sent."""
        key = self._natural(event)
        if self._replaying:
            # Only the first event of a Watch replays state the client may have seen.
            self._replaying = False
            if self.last is not None and key <= self.last and not self._back_in_queue(event):
                return None
        if self.last is not None and key <= self.last:
            if self.last.final:
                return None
            key = EventKey(self.last.attempt, self.last.step, self.last.rank + 1)
        self.last = key
        return key.text()

    def _back_in_queue(self, event: dict[str, Any]) -> bool:
        """Whether a replayed `queued` state is news to a client whose last event was a step:
        a running job only queues again once requeued (its worker lost, preempted), which a
        notice after that step said and the client missed. A queued event carries no
        attempt, so its natural id falls within the attempt the client saw. After a notice
        the client may have heard of the requeue itself, and the snapshot is dropped."""
        last = self.last
        return event.get("kind") == "queued" and last is not None and last.rank == RANK_PROGRESS

    def _natural(self, event: dict[str, Any]) -> EventKey:
        kind = event.get("kind")
        if kind in ("result", "error"):
            return FINAL
        attempt = int(event.get("attempt") or 0)
        if attempt > self._attempt:
            self._attempt, self._step = attempt, 0
        if kind == "progress":
            self._step = max(self._step, int(event.get("step") or 0))
            return EventKey(self._attempt, int(event.get("step") or 0), RANK_PROGRESS)
        if kind == "queued":
            return EventKey(self._attempt, self._step, RANK_QUEUED)
        return EventKey(self._attempt, self._step, RANK_NOTICE)
