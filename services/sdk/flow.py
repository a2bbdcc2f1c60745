"""Decisions both clients share: when to retry an overloaded call, when to re-attach to a
job whose stream broke and which of its events are news, what a finished stream and a
finished download must look like."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from typing import TypeGuard

from mediamesh.common.errors import StatusCode
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Error, Event, Notice, Progress, Queued, Result
from mediamesh.sdk.options import (
    RETRY_BACKOFF_MULTIPLIER,
    RETRY_INITIAL_BACKOFF_S,
    RETRY_MAX_BACKOFF_S,
    ClientSettings,
)
from mediamesh.sdk.types import Artifact

OVERLOADED = StatusCode.RESOURCE_EXHAUSTED
# A Download that breaks off resumes from the bytes already received, this many times.
DOWNLOAD_ATTEMPTS = 3
RESUMABLE_CODES = frozenset({StatusCode.UNAVAILABLE})
# How a lost connection reads (a gateway restarted, a proxy or the network dropped the
# stream, the gateway could not reach its scheduler): the job itself lives in the scheduler
# and goes on, so its stream is worth re-attaching. A deadline, a cancel or a refusal is not.
REATTACH_CODES = frozenset({StatusCode.UNAVAILABLE})


def overload_wait(error: GatewayError, retries_done: int, settings: ClientSettings) -> float | None:
    """Seconds to wait before submitting again, or None to raise the error.

    Only when the caller opted in, only for over-limit answers that say how long to wait, and
    never longer than max_overload_wait_s: a long wait is better decided by the caller.
    """
    if not settings.retry_on_overload or error.code != OVERLOADED:
        return None
    if retries_done >= settings.overload_retries:
        return None
    if not 0 < error.retry_after_s <= settings.max_overload_wait_s:
        return None
    return error.retry_after_s


def needs_download(event: Event) -> TypeGuard[Result]:
    """A result too large to come inline: the gateway sent its size and hash, not its bytes."""
    # A result that came as a URL was asked for as one (result_as_url): the caller fetches it.
    return isinstance(event, Result) and not event.data and event.size_bytes > 0 and not event.url


def is_final(event: Event) -> bool:
    """The last event of a job's stream."""
    return isinstance(event, Result | Error)


def ended_early(job_id: str) -> GatewayError:
    """The error for a stream that closed before its job ended."""
    return GatewayError(
        StatusCode.UNAVAILABLE, f"the event stream of job {job_id!r} ended before the job"
    )


def out_of_order(job_id: str, offset: int, expected: int) -> GatewayError:
    """The error for a chunk that does not continue the bytes received so far."""
    return GatewayError(
        StatusCode.DATA_LOSS, f"download of job {job_id!r}: chunk at {offset}, expected {expected}"
    )


def checked_artifact(job_id: str, data: bytes, mime_type: str, sha256: str) -> Artifact:
    """The downloaded bytes, if they match the hash the gateway sent with them."""
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise GatewayError(
            StatusCode.DATA_LOSS, f"download of job {job_id!r} is corrupt (sha256 mismatch)"
        )
    return Artifact(job_id, data, mime_type, sha256)


class JobStream:
    """One job's events across the streams that carry them: a Generate or Watch, then a new
    Watch each time one breaks off with the connection.

    A Watch opens with the job's current state, which the caller may have been given already:
    that first event is dropped when it says nothing new (the same queue place, a step or a
    notice already delivered). The Result or Error always comes through, and ends the stream,
    so the caller gets it exactly once.

    Re-attaching backs off as the channel's own retries do (full jitter), and gives up when
    `reattach_s` pass without news of the job, or when the caller's `stream_timeout_s`,
    counted from the first stream, would run out: it bounds the whole follow, not each Watch.

    A stream that breaks before its first event names no job. With `resendable` (a Generate,
    which always carries an idempotency key) the same request is sent again: the scheduler
    then either makes the job, if the first never arrived, or follows the one it made.
    """

    def __init__(
        self,
        settings: ClientSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        job_id: str = "",
        resendable: bool = False,
    ) -> None:
        self._reattach_s = settings.reattach_s
        self._clock = clock
        self._ends_at = (
            None if settings.stream_timeout_s is None else clock() + settings.stream_timeout_s
        )
        self._resendable = resendable
        self.job_id = job_id
        self._last: Event | None = None
        self._progress = (0, 0)  # the furthest (attempt, step) delivered
        self._notices: set[tuple[int, str]] = set()  # (attempt, kind) of those delivered
        self._replaying = False
        self._broken_since: float | None = None
        self._reattaches = 0

    def is_news(self, event: Event) -> bool:
        """Whether to give `event` to the caller; notes it when so."""
        self.job_id = event.job_id
        replayed, self._replaying = self._replaying, False
        if replayed and self._delivered(event):
            return False
        self._last = event
        if isinstance(event, Progress):
            self._progress = max(self._progress, (event.attempt, event.step))
        elif isinstance(event, Notice):
            self._notices.add((event.attempt, event.kind))
        self._broken_since, self._reattaches = None, 0
        return True

    def _delivered(self, event: Event) -> bool:
        if isinstance(event, Queued):
            last = self._last
            return isinstance(last, Queued) and (last.position, last.queue) == (
                event.position,
                event.queue,
            )
        if isinstance(event, Progress):
            return (event.attempt, event.step) <= self._progress
        if isinstance(event, Notice):
            return (event.attempt, event.kind) in self._notices
        return False

    def reattach_wait(self, error: GatewayError) -> float | None:
        """Seconds to wait before watching the job again, now that `error` broke its stream;
        None to raise `error`, which then names the job when one was accepted. With no job
        id yet, the wait is before sending the request again (`resendable`)."""
        if self.job_id:
            error.job_id = self.job_id
        elif not self._resendable:
            return None  # no event yet: whether a job was accepted, and which, is unknown
        if error.code not in REATTACH_CODES or self._reattach_s <= 0:
            return None
        now = self._clock()
        if self._broken_since is None:
            self._broken_since = now
        ceiling = min(
            RETRY_INITIAL_BACKOFF_S * RETRY_BACKOFF_MULTIPLIER**self._reattaches,
            RETRY_MAX_BACKOFF_S,
        )
        wait = random.uniform(0, ceiling)
        if now + wait - self._broken_since > self._reattach_s:
            return None
        if self._ends_at is not None and now + wait >= self._ends_at:
            return None
        self._reattaches += 1
        self._replaying = True
        return wait

    def watch_timeout_s(self) -> float | None:
        """The deadline of the next Watch: what is left of stream_timeout_s (None: none)."""
        if self._ends_at is None:
            return None
        return max(self._ends_at - self._clock(), 0.001)
