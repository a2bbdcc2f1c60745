"""The effects the scheduler core's parts queue for its owner, in the order they happened."""

from __future__ import annotations

from mediamesh.scheduler.core.effects import Effect, Transition
from mediamesh.scheduler.core.jobs import Job, JobState


class Outbox:
    """Effects waiting for the owner's next `take`."""

    def __init__(self) -> None:
        self._effects: list[Effect] = []

    def transition(self, job: Job, state: JobState, reason: str = "") -> None:
        """Move a job to `state` and tell the owner (to persist it and publish it)."""
        job.state = state
        self._effects.append(
            Transition(job, state, reason, job.worker_id or "", job.batch_id or "")
        )

    def emit(self, effect: Effect) -> None:
        """Queue any other effect (dispatch, cancel, notice, progress)."""
        self._effects.append(effect)

    def take(self) -> list[Effect]:
        """Every effect queued since the last call, oldest first."""
        effects, self._effects = self._effects, []
        return effects
