"""What happens at each step boundary of a running group: progress, cancel, preempt, save.

`StepTracker.on_step` is called by the pipeline's step callback with the latents after the
step. It emits events, and raises `BatchCancelled` to stop the denoising loop once no job
needs further steps (all cancelled, or preempted: handed back to resume elsewhere).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mediamesh.common.checkpoint_files import checkpoint_step
from mediamesh.common.errors import StatusCode
from mediamesh.common.work import (
    JobCheckpointed,
    JobFailed,
    JobNotice,
    JobParams,
    JobPreempted,
    Preview,
    StepDone,
)
from mediamesh.worker.core.batch import BatchCancelled, ControlView, Emit, emitted_together
from mediamesh.worker.models.checkpoint import (
    Checkpoint,
    checkpoint_path,
    snapshot_scheduler,
    write_checkpoint,
)
from mediamesh.worker.models.pausing import PipelineAside

log = logging.getLogger(__name__)

# Makes the preview of job `index` of a batch from the batch's latents after a step.
PreviewHook = Callable[[torch.Tensor, int, JobParams], Preview]


@dataclass
class Terminals:
    """Which jobs of a batch already have their one terminal event."""

    sink: Emit
    done: set[str] = field(default_factory=set)

    def send(self, job_id: str, event: Any) -> None:
        if job_id in self.done:
            return
        self.done.add(job_id)
        self.emit(event)

    def emit(self, event: Any) -> None:
        # A failing sink must not turn into a failed batch or a raising run_batch.
        try:
            self.sink(event)
        except Exception:
            log.exception("emit failed for %r", event)

    def has(self, job_id: str) -> bool:
        return job_id in self.done

    def together(self) -> AbstractContextManager[object]:
        """The events emitted inside leave in one delivery (one step of the batch)."""
        return emitted_together(self.sink)


@dataclass
class StepTracker:
    model: str
    jobs: list[JobParams]
    generators: list[torch.Generator]
    control: ControlView
    terminals: Terminals
    checkpoint_dir: Path
    scheduler: Any
    start_step: int = 0
    # Tensor-parallel helper ranks track the same steps but leave files to rank 0.
    persist: bool = True
    live: list[bool] = field(default_factory=list)
    periodic: dict[str, Path] = field(default_factory=dict)
    # Each job's checkpoint before its newest: kept until the next one is written, because
    # the scheduler may not have heard of the newest yet when this worker dies, and then
    # resumes the job from this one (deleting it at once had the job start over at step 0).
    superseded: dict[str, Path] = field(default_factory=dict)
    _step_started: float | None = None
    # Called after every step; tests and parallel hosts use it to observe boundaries.
    on_boundary: Callable[[int], None] | None = None
    # Latent previews for jobs with preview_every_steps; None: the model makes none.
    previewer: PreviewHook | None = None
    # The pipeline the loop runs in: what a pause sets aside for the batch that runs meanwhile.
    pipeline: Any = None
    # Steps of this call's loop when it runs only the tail of the schedule (an input image
    # with a strength), as the call counted them; None: the job's own steps.
    call_steps: int | None = None
    # CUDA devices the step computes on, waited for at each step boundary (see `_settle`).
    timing_devices: tuple[torch.device, ...] = ()

    def __post_init__(self) -> None:
        self.live = [not self.terminals.has(job.job_id) for job in self.jobs]

    @property
    def total_steps(self) -> int:
        """The steps of the jobs' run. Never read from the pipeline object, which is shared:
        before a call it holds the previous call's counts, and during a pause the urgent
        batch's; the host sets `call_steps` from this call itself."""
        return self.call_steps or self.jobs[0].generation.steps

    def mark_step_start(self, *_: Any) -> None:
        """Forward pre-hook on the denoiser: the first call after a boundary starts a step."""
        if self._step_started is None:
            self._settle()
            self._step_started = time.perf_counter()

    def _settle(self) -> None:
        # CUDA kernels run after their launch returns: unsynchronised, the clock measured
        # how long the step took to queue (and its start, the text encoders' queued work).
        # One wait per boundary is small beside a diffusion step.
        for device in self.timing_devices:
            torch.cuda.synchronize(device)

    def on_step(self, loop_index: int, latents: torch.Tensor) -> None:
        step = self.start_step + loop_index + 1
        self._settle()
        started = self._step_started or time.perf_counter()
        step_seconds = time.perf_counter() - started
        self._step_started = None
        if self.on_boundary is not None:
            self.on_boundary(step)
        for index, job in enumerate(self.jobs):
            if self.live[index] and self.control.is_cancelled(job.job_id):
                self.live[index] = False
                if self._ends_for_good(job.job_id):
                    self.discard_periodic(job.job_id)
                self.terminals.send(
                    job.job_id,
                    JobFailed(job.job_id, StatusCode.CANCELLED, f"cancelled at step {step}"),
                )
        if not any(self.live):
            raise BatchCancelled(f"every job cancelled by step {step}")
        with self.terminals.together():
            for index, job in enumerate(self.jobs):
                if self.live[index]:
                    preview = self._preview(index, step, latents)
                    self.terminals.emit(
                        StepDone(job.job_id, step, self.total_steps, step_seconds, preview)
                    )
        if step >= self.total_steps:
            return  # finishing costs less than a checkpoint and a resume
        if self.control.preempt_requested:
            self._preempt(step, latents)
        self._periodic(step, latents)
        self._maybe_pause(step, latents)

    def _ends_for_good(self, job_id: str) -> bool:
        """Whether a cancelled job will never resume (BatchControl.cancel). Otherwise its
        batch lost its caller (a scheduler restart broke the stream) or the worker stops:
        the scheduler runs the job again from the checkpoint it last heard of, so deleting
        its checkpoints here had it start over at step 0. A control that cannot tell (a
        tensor-parallel rank's copy) keeps them; the scheduler deletes an ended job's files."""
        discards = getattr(self.control, "discards_checkpoints", None)
        return discards is not None and bool(discards(job_id))

    def _maybe_pause(self, step: int, latents: torch.Tensor) -> None:
        """Give the device to urgent work if asked to (BatchControl.pause_here). A tensor
        parallel rank's control has no pause: its group would have to pause in step."""
        pause_here = getattr(self.control, "pause_here", None)
        if pause_here is None:
            return
        aside = PipelineAside(self.pipeline)
        writing: list[threading.Thread] = []

        def on_pause() -> None:
            live = [index for index in range(len(self.jobs)) if self.live[index]]
            for index in live:
                message = f"paused at step {step} for more urgent work"
                self.terminals.emit(JobNotice(self.jobs[index].job_id, "paused", message))
            # On disk too, so that the jobs resume elsewhere should this worker be lost; but
            # written while the urgent batch runs: written here, on the device's thread, the
            # files were most of a REALTIME job's wait under a flood (the priority bench).
            # Nothing the writer reads changes before `on_resume` joins it: the paused loop
            # is blocked here, and its sampler is set aside from the urgent batch.
            snapshots = [(index, self._snapshot(index, step, latents)) for index in live]
            writer = threading.Thread(
                target=self._keep_checkpoints,
                args=(snapshots,),
                name="pause-checkpoint",
                daemon=True,
            )
            writer.start()
            writing.append(writer)
            aside.pause()

        def on_resume() -> None:
            for writer in writing:
                writer.join()
            aside.resume()
            # The paused tracker's pre-hook fired during the other batch's steps.
            self._step_started = None
            for index, job in enumerate(self.jobs):
                if self.live[index]:
                    message = f"resumed at step {step + 1} on the same worker"
                    self.terminals.emit(JobNotice(job.job_id, "resumed", message))

        pause_here(on_pause, on_resume)

    def _preview(self, index: int, step: int, latents: torch.Tensor) -> Preview | None:
        job = self.jobs[index]
        every = job.generation.preview_every_steps
        # Helper ranks of a tensor group send nothing, so they skip the work too.
        if self.previewer is None or not self.persist or every <= 0 or step % every:
            return None
        try:
            return self.previewer(latents, index, job)
        except Exception:
            # A preview is a courtesy: the job goes on without it.
            log.warning("no preview for job %s at step %d", job.job_id, step, exc_info=True)
            return None

    def _preempt(self, step: int, latents: torch.Tensor) -> None:
        for index, job in enumerate(self.jobs):
            if not self.live[index]:
                continue
            self.live[index] = False
            self.terminals.send(job.job_id, self._hand_back(index, step, latents))
        raise BatchCancelled(f"preempted at step {step}")

    def _hand_back(self, index: int, step: int, latents: torch.Tensor) -> JobPreempted:
        """The job's preemption with its checkpoint after `step`; when that cannot be written,
        with the last one it has (or none: it starts over), for a failed write must not fail
        a job that a checkpoint was only meant to save time for."""
        job = self.jobs[index]
        path = self._write(index, step, latents, "preemption")
        if path is not None:
            self.discard_periodic(job.job_id)
            return JobPreempted(job.job_id, str(path), step)
        last = self.periodic.pop(job.job_id, None)
        older = self.superseded.pop(job.job_id, None)
        if older is not None and older != last and self.persist:
            older.unlink(missing_ok=True)
        if last is not None:
            last_step = checkpoint_step(last.name) or 0
            return JobPreempted(job.job_id, str(last), last_step, wrote_checkpoint=False)
        if self.start_step and job.resume_checkpoint:
            # Resumed here and not saved since: the file it came with is still its newest.
            reference, reference_step = job.resume_checkpoint, self.start_step
        else:
            reference, reference_step = "", 0
        return JobPreempted(job.job_id, reference, reference_step, wrote_checkpoint=False)

    def _periodic(self, step: int, latents: torch.Tensor) -> None:
        for index, job in enumerate(self.jobs):
            every = job.checkpoint_every_steps
            if not self.live[index] or every <= 0 or step % every != 0:
                continue
            self._keep_checkpoint(index, step, latents)

    def _keep_checkpoint(self, index: int, step: int, latents: torch.Tensor) -> None:
        """Write a checkpoint the job can resume from, replacing its previous one; when it
        cannot be written, the previous one stays the job's and the batch goes on."""
        path = self._write(index, step, latents, "periodic")
        if path is not None:
            self._keep(index, step, path)

    def _keep(self, index: int, step: int, path: Path) -> None:
        job = self.jobs[index]
        previous = self.periodic.get(job.job_id)
        self.periodic[job.job_id] = path
        if previous is not None and previous != path:
            older = self.superseded.get(job.job_id)
            self.superseded[job.job_id] = previous
            if older is not None and older not in (previous, path) and self.persist:
                older.unlink(missing_ok=True)
        self.terminals.emit(JobCheckpointed(job.job_id, str(path), step))

    def _keep_checkpoints(self, snapshots: list[tuple[int, Checkpoint]]) -> None:
        """Write snapshots taken at a pause (on a thread of their own); a failure leaves the
        job resumable from memory here, only not elsewhere, so it is logged, not raised."""
        for index, checkpoint in snapshots:
            path = checkpoint_path(self.checkpoint_dir, checkpoint.job.job_id, checkpoint.step)
            if self._saved(path, checkpoint, "pause"):
                self._keep(index, checkpoint.step, path)

    def discard_periodic(self, job_id: str) -> None:
        """A finished job, or one cancelled for good, will never resume: its periodic and
        pause checkpoints are garbage."""
        for kept in (self.periodic, self.superseded):
            path = kept.pop(job_id, None)
            if path is not None and self.persist:
                path.unlink(missing_ok=True)

    def _write(self, index: int, step: int, latents: torch.Tensor, why: str) -> Path | None:
        """The job's checkpoint after `step`, written; None when it could not be."""
        path = checkpoint_path(self.checkpoint_dir, self.jobs[index].job_id, step)
        if not self.persist:
            return path
        return path if self._saved(path, self._snapshot(index, step, latents), why) else None

    def _saved(self, path: Path, checkpoint: Checkpoint, why: str) -> bool:
        """Whether the checkpoint is on disk (or left to rank 0). A checkpoint is insurance:
        one that cannot be written (a full disk, a quota, the folder gone) is logged and
        costs the job only the steps it would have saved."""
        if not self.persist:
            return True
        try:
            write_checkpoint(path, checkpoint)
        except Exception as exc:
            log.warning("%s checkpoint not written to %s: %s", why, path, exc, exc_info=True)
            return False
        return True

    def _snapshot(self, index: int, step: int, latents: torch.Tensor) -> Checkpoint:
        timesteps = getattr(self.scheduler, "timesteps", torch.empty(0))
        return Checkpoint(
            model=self.model,
            job=self.jobs[index],
            step=step,
            total_steps=self.total_steps,
            latents=latents[index : index + 1].detach().cpu(),
            scheduler_state=snapshot_scheduler(self.scheduler, latents.shape, index, step),
            # Stochastic samplers keep drawing from the job's generator after step k.
            generator_state=self.generators[index].get_state(),
            remaining_timesteps=timesteps[-(self.total_steps - step) :],
        )
