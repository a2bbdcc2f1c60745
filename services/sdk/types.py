"""Plain values the SDK returns: job states, priorities, handles, job and model descriptions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from mediamesh.common.job_states import ENDED_STATE_NAMES
from mediamesh.common.limits import MAX_JOB_PAGE_SIZE


class JobState(StrEnum):
    """Where a job is in its life (mediamesh.v1.JobState)."""

    UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    QUEUED = "QUEUED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"

    @property
    def terminal(self) -> bool:
        """True once the job has ended, with a result or without one."""
        return self.value in ENDED_STATE_NAMES


class Priority(StrEnum):
    """Scheduling class of a job; higher classes are served first."""

    REALTIME = "REALTIME"
    STANDARD = "STANDARD"
    BATCH = "BATCH"

    @classmethod
    def parse(cls, value: Priority | str) -> Priority:
        """A priority from its name in any case; ValueError names the choices."""
        try:
            return cls(str(value).upper())
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise ValueError(f"priority must be one of {choices}, not {value!r}") from None


@dataclass(frozen=True, slots=True)
class JobHandle:
    """An accepted job: its id, and whether an earlier job with the same key was returned."""

    job_id: str
    state: JobState
    deduplicated: bool = False
    # The job as `job()` would describe it when accepted; None from a mesh too old to say.
    job: JobInfo | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Everything the mesh knows about one job (GetJob, Cancel)."""

    job_id: str
    model: str
    state: JobState
    priority: Priority | None
    tenant: str
    created_unix_ms: int
    finished_unix_ms: int
    attempts: int
    step: int
    total_steps: int
    seed: int
    worker_id: str
    # Batch it ran in last; jobs that shared a pipeline call share it ("" when unknown).
    batch_id: str = ""
    # What the job was accepted with, every default applied; 0 where a field does not apply
    # to the model's modality. `steps` is what was asked; `total_steps` what the run takes.
    prompt: str = ""
    steps: int = 0
    width: int = 0
    height: int = 0
    num_frames: int = 0
    fps: int = 0
    # Its batch is paused at a step boundary on its worker while more urgent work runs; it
    # resumes there. The state stays RUNNING meanwhile, which alone would read as stuck.
    paused: bool = False
    # When the mesh forgets the ended job and deletes its result (Unix ms): its end plus the
    # scheduler's retention_s; 0 while it is unfinished.
    expires_unix_ms: int = 0
    # Result metadata once SUCCEEDED (the bytes come from watch or download).
    mime_type: str = ""
    size_bytes: int = 0
    sha256: str = ""
    error_code: str = ""
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DeletedJob:
    """An ended job deleted before its retention (delete_job): the mesh no longer knows it."""

    job_id: str
    # The state it had ended in.
    state: JobState
    # Bytes of result deleted; 0 for a job that had none.
    result_bytes: int


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs a listing holds, and where its page starts (Client.list_jobs)."""

    states: tuple[JobState, ...] = ()
    models: tuple[str, ...] = ()
    # At most 100; 0 takes the mesh's default (20).
    page_size: int = 0
    # The last job id of the previous page.
    after: str = ""
    oldest_first: bool = False

    @classmethod
    def of(
        cls,
        states: Iterable[JobState | str] = (),
        models: Iterable[str] = (),
        page_size: int = 0,
        after: str | None = None,
        oldest_first: bool = False,
    ) -> JobQuery:
        """A query from loosely typed arguments; ValueError naming the one out of range."""
        if isinstance(states, str):
            # One state (a JobState is a str too), not the letters of its name.
            states = (states,)
        parsed = []
        for value in states:
            try:
                state = JobState(str(value).upper())
                if state is JobState.UNSPECIFIED:
                    raise ValueError(value)
                parsed.append(state)
            except ValueError:
                choices = ", ".join(s.value for s in JobState if s is not JobState.UNSPECIFIED)
                raise ValueError(f"states: {value!r} is not a job state; use {choices}") from None
        if not 0 <= page_size <= MAX_JOB_PAGE_SIZE:
            raise ValueError(f"page_size: {page_size}; allowed 0..{MAX_JOB_PAGE_SIZE}")
        if isinstance(models, str):
            models = (models,)
        return cls(tuple(parsed), tuple(models), page_size, after or "", oldest_first)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a job listing, in the order asked for."""

    jobs: list[JobInfo]
    # More jobs follow: list again with `after=page.last_id`.
    has_more: bool

    @property
    def last_id(self) -> str | None:
        """The id the next page starts after (None for an empty page)."""
        return self.jobs[-1].job_id if self.jobs else None


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """Defaults and limits of one model; 0 where a field does not apply to its modality."""

    default_steps: int
    max_steps: int
    default_width: int
    default_height: int
    max_width: int
    max_height: int
    size_multiple: int
    default_num_frames: int
    max_num_frames: int
    default_duration_s: float
    max_duration_s: float
    default_guidance_scale: float
    max_guidance_scale: float
    max_batch: int
    max_prompt_chars: int


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    """A LoRA adapter a request may name for a model (the `adapters` option)."""

    name: str
    # The scale a request that names the adapter without one gets.
    default_scale: float


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A registry model and whether the mesh can serve it now."""

    name: str
    modality: str
    pipeline: str
    parallelism: str
    ready: bool
    mime_type: str
    limits: ModelLimits
    devices: tuple[str, ...] = ()
    # GenerateRequest fields the model uses; setting any other model field is refused.
    accepted_fields: tuple[str, ...] = ()
    # Values `output_format` may take; the first is the model's default.
    output_formats: tuple[str, ...] = ()
    # What a preempted job does: "resume" at its step or "restart" from step 0 ("" unknown).
    preemption: str = ""
    # Whether progress can carry latent previews (the preview_every_steps option).
    previews: bool = False
    # Input images the model takes ("image", "mask_image"), all required.
    inputs: tuple[str, ...] = ()
    # Strength of an image request that sets none (0 for models without one).
    default_strength: float = 0.0
    # Warm-up of its listed shapes: "none", "warming" (not ready yet), "warm", "cold" (ready;
    # its next load runs them) or "pending".
    warmup: str = ""
    # LoRA adapters a request may name for the model, in the registry's order.
    adapters: tuple[AdapterInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class UploadHandle:
    """A stored upload: name it as the image_id or mask_image_id option."""

    input_id: str
    size_bytes: int
    sha256: str
    # When it is deleted unless a job uses it, Unix milliseconds.
    expires_unix_ms: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a downloaded artifact, as the gateway streams it."""

    data: bytes = field(repr=False)
    offset: int
    total_size: int
    mime_type: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Artifact:
    """A finished job's output, fetched whole and checked against its SHA-256."""

    job_id: str
    data: bytes = field(repr=False)
    mime_type: str
    sha256: str
