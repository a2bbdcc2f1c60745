"""Decisions both clients share: when to retry an overloaded call, when to re-attach to a
job whose stream broke and which of its events are news, what a finished stream and a
finished download must look like."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from typing import Protocol, TypeGuard

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
# The most a retry of an over-limit submit waits beyond the gateway's hint (see overload_wait):
# enough to spread callers refused together over a few tokens' time, little enough that tokens
# are seldom left unclaimed (at a rate R with burst B, N callers refused together all get in
# within about 1.25 * (N - B) / R + 1 s, as the README says).
OVERLOAD_SPREAD_MAX_S = 0.5
# The least time left to send a not yet accepted request once more in: enough for a call to
# a gateway that refuses connections to fail, and for one that is up to answer.
LAST_SEND_S = 0.05
# How many times a unary call is sent when each is answered UNAVAILABLE: gRPC's own ceiling,
# which the channel's retry policy had for these calls; more would hold a caller that sends
# many (a batch) for all of timeout_s on each call to a gateway that is down.
UNARY_ATTEMPTS = 5
# How a submit or generate that failed before its job id came may still have made the job:
# the call ended before the answer (a deadline, a lost connection, a closed client), or the
# gateway could not tell (its scheduler unreachable). A refusal naming a field made none.
UNSURE_CODES = frozenset(
    {
        StatusCode.DEADLINE_EXCEEDED,
        StatusCode.UNAVAILABLE,
        StatusCode.CANCELLED,
        StatusCode.UNKNOWN,
    }
)


class StreamLimit(Protocol):
    """When the SDK itself stops waiting on a stream call, which the transports enforce on
    the client side: a gRPC deadline on Generate would travel to the gateway, which makes
    it the job's own deadline, while `stream_timeout_s` only bounds how long the caller
    waits (a job's limit is its `timeout_ms`)."""

    def seconds_left(self) -> float | None:
        """Seconds until the open call is to be given up, as of now (None: no limit). Asked
        again when they run out, since the limit may have moved meanwhile."""
        ...

    def expired(self, connected: bool, connection_error: str = "") -> GatewayError:
        """The error to raise for a call given up because its limit ran out; `connected`:
        whether the channel was connected to the gateway then (or still trying to reach
        it), and if not, `connection_error`: gRPC's account of its last try, when known."""
        ...

    def failed(self, error: GatewayError, connected: bool) -> None:
        """Note that the open call failed with `error`; `connected`: whether the channel was
        connected to the gateway just after, so that the status is one the gateway itself
        sent (a transport failure leaves the channel reconnecting)."""
        ...


def unreachable_gateway(target: str, tried: str, cause: str = "") -> GatewayError:
    """The error of a call that no gateway ever answered: one wording, naming the address,
    for every call and client command (`tried`: how long, and what bounded it; `cause`:
    gRPC's own reason, kept after the sentence a user reads first)."""
    message = f"cannot reach the gateway at {target} ({tried})"
    return GatewayError(StatusCode.UNAVAILABLE, f"{message}: {cause}" if cause else message)


def unary_failure(
    error: GatewayError,
    target: str,
    tried_s: float,
    connected: bool,
    connection_error: str = "",
) -> GatewayError:
    """What a failed unary call raises: `error`, or, when it is UNAVAILABLE or
    DEADLINE_EXCEEDED and the channel is not connected (so no gateway answered it: one that
    did would have left the channel READY), the same words as a generate that never reached
    the gateway, with `connection_error` (gRPC's account of the last connection try) as the
    cause when known. A short `timeout_s` runs out while gRPC still retries the connection,
    so which of the two codes comes depends only on the timing, and a bare "Deadline
    Exceeded" would hide why (a TLS handshake refused, say)."""
    unanswered = (StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED)
    if error.code not in unanswered or connected:
        return error
    return unreachable_gateway(
        target, f"{tried_s:.1f} s of tries", connection_error or error.message
    )


def resend_wait(tries: int, deadline: float | None, now: float) -> float | None:
    """Seconds to wait before sending a unary call once more after its `tries`-th UNAVAILABLE
    (from 0), or None to raise it: the channel's backoff with jitter, for at most
    UNARY_ATTEMPTS sends within `deadline` (the last just before it, as reattach_wait does)."""
    if tries + 1 >= UNARY_ATTEMPTS:
        return None
    ceiling = min(RETRY_INITIAL_BACKOFF_S * RETRY_BACKOFF_MULTIPLIER**tries, RETRY_MAX_BACKOFF_S)
    wait = random.uniform(0, ceiling)
    if deadline is not None and now + wait >= deadline - LAST_SEND_S:
        if deadline - now <= LAST_SEND_S:
            return None
        wait = deadline - now - LAST_SEND_S
    return wait


class FirstMessageLimit:
    """The StreamLimit of a Download: timeout_s until its first message, as for a unary call
    (its failure then worded as one's, naming the gateway), and stream_timeout_s, from its
    start, for the whole of it."""

    def __init__(
        self, settings: ClientSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock, self._target = clock, settings.target
        self._timeout_s, self._stream_timeout_s = settings.timeout_s, settings.stream_timeout_s
        self._started = clock()
        self._answered = False
        self._unanswered: GatewayError | None = None

    def received(self) -> None:
        """Note that a message came: timeout_s no longer bounds the call."""
        self._answered = True

    def _ends_at(self) -> float | None:
        ends = [] if self._stream_timeout_s is None else [self._started + self._stream_timeout_s]
        if not self._answered and self._timeout_s is not None:
            ends.append(self._started + self._timeout_s)
        return min(ends, default=None)

    def seconds_left(self) -> float | None:
        """See StreamLimit."""
        ends_at = self._ends_at()
        return None if ends_at is None else ends_at - self._clock()

    def expired(self, connected: bool, connection_error: str = "") -> GatewayError:
        """See StreamLimit."""
        tried_s = self._clock() - self._started
        if self._answered:
            return GatewayError(
                StatusCode.DEADLINE_EXCEEDED,
                f"download: stream_timeout_s ({self._stream_timeout_s:g} s) ran out",
            )
        unanswered = GatewayError(
            StatusCode.DEADLINE_EXCEEDED,
            f"no answer from the gateway at {self._target} within timeout_s ({tried_s:.1f} s)",
        )
        return unary_failure(unanswered, self._target, tried_s, connected, connection_error)

    def failed(self, error: GatewayError, connected: bool) -> None:
        """See StreamLimit."""
        if not self._answered:
            tried_s = self._clock() - self._started
            self._unanswered = unary_failure(error, self._target, tried_s, connected)

    def error_to_raise(self, error: GatewayError) -> GatewayError:
        """`error` of the call, worded as a unary call's when no message had come."""
        return self._unanswered if self._unanswered is not None else error


def keyed_failure(error: GatewayError, idempotency_key: str, call: str) -> GatewayError:
    """`error` of a submit or generate (`call`) that failed before a job id came, carrying
    the `idempotency_key` it sent; when the job may have been made all the same, its message
    says so and how to get it. Unchanged once a job id is known, or without a key."""
    if error.job_id or not idempotency_key:
        return error
    if error.code not in UNSURE_CODES or error.field is not None:
        error.idempotency_key = idempotency_key
        return error
    hint = (
        f"; the job may have been made all the same: {call} again with "
        f"idempotency_key={idempotency_key!r} to get it (that key answers the job it made, "
        "never a second one)"
    )
    return GatewayError(
        error.code,
        error.message + hint,
        error.retry_after_s,
        idempotency_key=idempotency_key,
    )


def closed_client() -> GatewayError:
    """The error of a call on a closed client, or of one open when the client was closed."""
    return GatewayError(
        StatusCode.CANCELLED, "the client is closed (close() or the end of its `with` block)"
    )


def overload_wait(
    error: GatewayError, retries_done: int, waited_s: float, settings: ClientSettings
) -> float | None:
    """Seconds to wait before submitting again, or None to raise the error.

    Only when the caller opted in, and only for over-limit answers that say how long to wait.
    The wait is the gateway's hint plus a random part that doubles with each retry, up to
    OVERLOAD_SPREAD_MAX_S: callers refused together (a burst of submits against the tenant's
    rate) are each told when the next token comes, and coming back all at once for it, all
    but one would be refused again, round after round. Bounded by time, not tries: all the
    waits of one call stay within max_overload_wait_s (`waited_s` is theirs so far), beyond
    which a wait is better decided by the caller; overload_retries, when set, bounds the tries
    too.
    """
    if not settings.retry_on_overload or error.code != OVERLOADED:
        return None
    if settings.overload_retries is not None and retries_done >= settings.overload_retries:
        return None
    hint = error.retry_after_s
    time_left = settings.max_overload_wait_s - waited_s
    if not 0 < hint <= time_left:
        return None
    # The doubling stops at the cap: 2**retries_done alone overflows a float past 1023.
    spread = min(hint * 2 ** min(retries_done, 32), OVERLOAD_SPREAD_MAX_S)
    return min(hint + random.uniform(0, spread), time_left)


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
    It is the `StreamLimit` of the calls it makes: the transports give a call up when it
    runs out, leaving the job to run, and raise `expired()`, naming the job.

    A stream that breaks before its first event names no job. With `resendable` (a Generate,
    which always carries an idempotency key) the same request is sent again: the scheduler
    then either makes the job, if the first never arrived, or follows the one it made. Until
    that first event, which says the job was accepted, the caller's `timeout_s` (what a
    Submit may take) bounds the sending and the waiting too: an unreachable gateway then
    fails the call soon after it, as a Submit would, rather than after `reattach_s`. A Watch
    of a job given by id is bounded the same way until its first event: `reattach_s` is for
    a job whose gateway did answer and then dropped, not for a gateway never reached.

    Until that first event, an error the gateway itself sent (UNAVAILABLE: its scheduler
    unreachable) is what the call raises, at once or when timeout_s runs out while it is
    still being sent, rather than "no answer"; and an error raised then carries the
    `idempotency_key` the request was sent with, which gets the job if one was made.
    """

    def __init__(
        self,
        settings: ClientSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        job_id: str = "",
        resendable: bool = False,
        idempotency_key: str = "",
    ) -> None:
        self._reattach_s = settings.reattach_s
        self._idempotency_key = idempotency_key
        self._clock = clock
        self._target = settings.target
        self._stream_timeout_s = settings.stream_timeout_s
        self._timeout_s = settings.timeout_s
        started = clock()
        self._ends_at = (
            None if settings.stream_timeout_s is None else started + settings.stream_timeout_s
        )
        # Until a first event: when to stop sending a resendable request, or watching a job
        # through a gateway that has not answered once (job_id given: a Watch).
        bounded = resendable or bool(job_id)
        self._accepted_by = (
            started + settings.timeout_s if bounded and settings.timeout_s is not None else None
        )
        # Whether any event came back: until then an UNAVAILABLE means no gateway was reached.
        self._answered = False
        self._started = started
        self._resendable = resendable
        self.job_id = job_id
        self._last: Event | None = None
        self._progress = (0, 0)  # the furthest (attempt, step) delivered
        self._notices: set[tuple[int, str]] = set()  # (attempt, kind) of those delivered
        self._replaying = False
        self._broken_since: float | None = None
        self._reattaches = 0
        # The error `expired` made, once a limit ran out.
        self._expired: GatewayError | None = None
        # Until the first event: the last failed call's error, and whether the gateway itself
        # sent it (the channel still connected after).
        self._failure: GatewayError | None = None
        self._failure_sent_by_gateway = False

    def is_news(self, event: Event) -> bool:
        """Whether to give `event` to the caller; notes it when so."""
        self.job_id = event.job_id
        self._answered = True
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
        if error is self._expired or error.code not in REATTACH_CODES or self._reattach_s <= 0:
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
        ends_at = self._waiting_ends_at()
        if ends_at is not None and now + wait >= ends_at:
            if self._answered or ends_at - now <= LAST_SEND_S:
                return None
            # Not yet answered: the request (a Generate with its key, or a Watch, a read) is
            # sent once more just before timeout_s is out, so that a gateway back by then
            # still takes it, and one that is not fails the call at its timeout rather than a
            # backoff's length before it.
            wait = ends_at - now - LAST_SEND_S
        self._reattaches += 1
        self._replaying = True
        return wait

    def wait_out_overload(self, wait_s: float) -> bool:
        """Whether the caller may wait `wait_s`, as an over-limit answer before acceptance
        asked (retry_on_overload), and then send again: not when stream_timeout_s would run
        out first. The gateway did answer, so the wait for acceptance starts again after."""
        now = self._clock()
        if self._ends_at is not None and now + wait_s >= self._ends_at:
            return False
        if self._timeout_s is not None and self._accepted_by is not None:
            self._accepted_by = now + wait_s + self._timeout_s
        self._broken_since, self._reattaches = None, 0
        return True

    def failed(self, error: GatewayError, connected: bool) -> None:
        """Note a failed call (see StreamLimit): before the first event, what the gateway
        said, if it said anything, is the reason to give when the sending stops."""
        if not self._answered:
            self._failure, self._failure_sent_by_gateway = error, connected

    def error_to_raise(self, error: GatewayError) -> GatewayError:
        """What to raise once `reattach_wait` said no to `error`: `error` itself, or, for a
        request no gateway answered before it was given up, one that names the gateway;
        before a job id, with the idempotency key sent (see keyed_failure)."""
        if self._answered:
            return error
        return keyed_failure(self._unanswered_error(error), self._idempotency_key, "generate")

    def _unanswered_error(self, error: GatewayError) -> GatewayError:
        sent_by_gateway = error is self._failure and self._failure_sent_by_gateway
        if error.code not in REATTACH_CODES or error is self._expired or sent_by_gateway:
            return error
        unreachable = unreachable_gateway(
            self._target,
            f"{self._clock() - self._started:.1f} s of tries{self._bound_text()}",
            error.message,
        )
        unreachable.job_id = self.job_id
        return unreachable

    def seconds_left(self) -> float | None:
        """Seconds until the open call is given up (see StreamLimit): what is left of
        stream_timeout_s, and before the job is accepted of timeout_s too."""
        ends_at = self._waiting_ends_at()
        return None if ends_at is None else ends_at - self._clock()

    def expired(self, connected: bool, connection_error: str = "") -> GatewayError:
        """The error for a call given up as its limit ran out (see StreamLimit); final: it is
        neither re-attached nor sent again, whatever its code."""
        self._expired = self._expiry_error(connected, connection_error)
        return self._expired

    def _expiry_error(self, connected: bool, connection_error: str) -> GatewayError:
        if self.job_id and self._ends_at is not None and self._clock() >= self._ends_at:
            # Only the waiting ends: the job keeps its own limit, timeout_ms.
            return GatewayError(
                StatusCode.DEADLINE_EXCEEDED,
                f"stream_timeout_s ({self._stream_timeout_s:g} s) ran out before job "
                f"{self.job_id!r} ended; the job goes on: follow it with watch(job_id) or "
                "stop it with cancel(job_id)",
                job_id=self.job_id,
            )
        # timeout_s ran out before any event: either the gateway could not be reached (the
        # channel still trying to connect), or it was and did not answer in time.
        took = f"{self._clock() - self._started:.1f} s{self._bound_text()}"
        failure = None if self._answered else self._failure
        if failure is not None and self._failure_sent_by_gateway:
            # The gateway did answer, each time with an error: that is the reason, the
            # last try's, not silence.
            return GatewayError(
                failure.code, failure.message, failure.retry_after_s, job_id=self.job_id
            )
        if not connected:
            cause = connection_error or (failure.message if failure is not None else "")
            unreachable = unreachable_gateway(self._target, took, cause)
            unreachable.job_id = self.job_id
            return unreachable
        if self.job_id:  # a Watch the gateway took but has not answered
            return GatewayError(
                StatusCode.DEADLINE_EXCEEDED,
                f"no answer from the gateway at {self._target} about job {self.job_id!r} "
                f"({took}); the job, if it exists, goes on",
                job_id=self.job_id,
            )
        return GatewayError(
            StatusCode.DEADLINE_EXCEEDED, f"no answer from the gateway at {self._target} ({took})"
        )

    def _waiting_ends_at(self) -> float | None:
        """When the caller stops waiting: stream_timeout_s from the first call, and until a
        job is accepted, timeout_s from then too (None: never)."""
        ends = [self._ends_at]
        if not self._answered:
            ends.append(self._accepted_by)
        return min((end for end in ends if end is not None), default=None)

    def _bound_text(self) -> str:
        """Which of the caller's settings bounded the wait for acceptance, for a message."""
        bounds = []
        if self._timeout_s is not None and self._accepted_by is not None:
            bounds.append(f"timeout_s is {self._timeout_s:g}")
        if self._stream_timeout_s is not None:
            bounds.append(f"stream_timeout_s is {self._stream_timeout_s:g}")
        return "; " + ", ".join(bounds) if bounds else ""
