"""Decisions both clients share: when to retry an overloaded call, what a finished stream
and a finished download must look like."""

from __future__ import annotations

import hashlib
from typing import TypeGuard

from mediamesh.common.errors import StatusCode
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Error, Event, Result
from mediamesh.sdk.options import ClientSettings
from mediamesh.sdk.types import Artifact

OVERLOADED = StatusCode.RESOURCE_EXHAUSTED
# A Download that breaks off resumes from the bytes already received, this many times.
DOWNLOAD_ATTEMPTS = 3
RESUMABLE_CODES = frozenset({StatusCode.UNAVAILABLE})


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
