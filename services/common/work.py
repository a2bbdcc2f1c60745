"""The work a scheduler hands a worker and what the worker reports back, as plain data.

Both services depend on these types and neither owns them; `common.api.worker_wire` maps
them to and from the Worker service's protobuf messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from mediamesh.common.generation import GenerationParams


@dataclass(frozen=True)
class JobParams:
    """One job of a batch, defaults already applied by the scheduler."""

    job_id: str
    generation: GenerationParams
    # Checkpoint reference to resume from; None starts at step 0.
    resume_checkpoint: str | None = None
    # Write a checkpoint every N steps (0 = only when preempted).
    checkpoint_every_steps: int = 0


@dataclass(frozen=True)
class Preview:
    """A small encoded picture of a job's current latents (at most 256 px a side)."""

    data: bytes
    mime_type: str


@dataclass(frozen=True)
class StepDone:
    """A job finished one denoising step."""

    job_id: str
    step: int
    total_steps: int
    # Wall seconds of this step for the whole batch, for the scheduler's cost model.
    step_seconds: float
    # Set on every preview_every_steps-th step of a job that asked for previews.
    preview: Preview | None = None


@dataclass(frozen=True)
class JobFinished:
    """A job's result: terminal."""

    job_id: str
    data: bytes
    mime_type: str
    seed: int


@dataclass(frozen=True)
class JobFailed:
    """A job ended without a result: terminal."""

    job_id: str
    # gRPC status code name: "CANCELLED", "INTERNAL", "INVALID_ARGUMENT", ...
    code: str
    message: str


@dataclass(frozen=True)
class JobPreempted:
    """A job stopped at `step` and left a checkpoint to resume from: terminal for this run.
    `wrote_checkpoint` is False for a job handed back before it ran, with the checkpoint it
    came with (or none)."""

    job_id: str
    checkpoint: str
    step: int
    wrote_checkpoint: bool = True


@dataclass(frozen=True)
class JobCheckpointed:
    """A periodic checkpoint was written; the job keeps running."""

    job_id: str
    checkpoint: str
    step: int


@dataclass(frozen=True)
class JobNotice:
    """Something a caller should know about a running job."""

    job_id: str
    # "resumed" (from a checkpoint) or "restarted" (checkpoint unreadable, from step 0).
    kind: str
    message: str
    # "oom_split": the batch ran out of memory and runs again in batches of at most this.
    fitted_batch: int = 0


WorkerEvent = JobFinished | JobFailed | StepDone | JobPreempted | JobCheckpointed | JobNotice
