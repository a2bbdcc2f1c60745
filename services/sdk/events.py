"""The typed events of a job, as `generate` and `watch` yield them.

A stream ends with exactly one Result or Error. Every event names its job and the job's state
after it, so a caller can match on the class alone:

    match event:
        case Progress(step=step, total_steps=total): ...
        case Result(data=data): ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mediamesh.sdk.types import JobState


@dataclass(frozen=True, slots=True, kw_only=True)
class Queued:
    """The job waits in a queue: sent when it is accepted and when its place changes."""

    job_id: str
    state: JobState
    position: int  # jobs ahead of this one (0 = next)
    # Estimated seconds until the job finishes; None while no worker serves the model (its
    # wait is a worker starting, which the mesh cannot estimate).
    eta_s: float | None
    queue: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A denoising step has finished."""

    job_id: str
    state: JobState
    step: int
    total_steps: int
    # Which run of the job (1 = first; higher after a lost worker or a preemption).
    attempt: int
    # The step's latent preview (an encoded picture, at most 256 px a side) when the job
    # asked for previews with preview_every_steps and this step is one of them; else empty.
    preview: bytes = field(default=b"", repr=False)
    preview_mime_type: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """Informational: dispatched, preempted, resumed, requeued, spot fallback."""

    job_id: str
    state: JobState
    kind: str
    message: str
    worker_id: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """The job succeeded; `data` holds the whole artifact, downloaded if it was not inline,
    unless it came as a URL (`url`)."""

    job_id: str
    state: JobState
    data: bytes = field(repr=False)
    mime_type: str
    seed: int  # the seed actually used, to reproduce the result
    # Set when the artifact was above the gateway's inline limit and came by Download.
    size_bytes: int = 0
    sha256: str = ""
    # A presigned URL of the artifact and when it expires, Unix ms: set for a job submitted
    # with result_as_url (or a result above the inline limit) when the artifact store can
    # sign one (S3-compatible), and then `data` stays empty: fetch the URL. A store that
    # cannot sign (the local one) sends no URL, and the result is downloaded into `data` as
    # any result that was not inline.
    url: str = ""
    url_expires_unix_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """The job ended without a result: failed, cancelled or expired."""

    job_id: str
    state: JobState
    code: str  # a gRPC status code name, e.g. "CANCELLED", "DEADLINE_EXCEEDED"
    message: str


Event = Queued | Progress | Notice | Result | Error
