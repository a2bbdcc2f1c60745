"""The batch runner shared by every diffusers-backed host.

A batch is split into groups that can share one pipeline call: fresh jobs together,
resumed jobs by the step they resume from (and audio jobs by duration). Each group runs
with one `torch.Generator` per job, so a job's noise never depends on its neighbours.

Batch tolerance: a job's pixels alone and in a batch of three differ by at most 1/255
(one 8-bit level) for flux-tiny on CPU float32; the difference is float rounding in
batched matmuls, not different noise (see tests/service/worker_models/test_flux_host.py).
"""

from __future__ import annotations

import logging
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobFinished, JobNotice, JobParams, JobPreempted
from mediamesh.worker.core import call_hooks
from mediamesh.worker.core.batch import BatchCancelled, ControlView, DeviceGroupLost, Emit
from mediamesh.worker.job_log import log_failed_jobs
from mediamesh.worker.models.adapters import AdapterCache, AdapterLoadError
from mediamesh.worker.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    merge_scheduler_states,
    read_checkpoint,
    resume_schedule,
)
from mediamesh.worker.models.device_loss import device_lost, lost_devices
from mediamesh.worker.models.out_of_memory import is_out_of_memory, retry_in_halves
from mediamesh.worker.models.previews import latent_previewer
from mediamesh.worker.models.progress import StepTracker, Terminals

log = logging.getLogger(__name__)

# Parameters every job of one run_batch call must share (the scheduler groups by them).
SHARED_FIELDS = ("steps", "width", "height", "num_frames", "guidance_scale")


class DiffusionHost:
    """Runs batches on one loaded pipeline; subclasses call and decode their family."""

    def __init__(
        self,
        spec: ModelSpec,
        pipeline: DiffusionPipeline,
        *,
        device: str,
        checkpoint_dir: Path,
        device_ids: list[str] | None = None,
    ) -> None:
        self.spec = spec
        self.pipeline = pipeline
        self.device = torch.device(device)
        self.device_ids = device_ids or [device]
        # Pipeline mode may list "disk" or "cpu" beside its GPUs; only CUDA runs async.
        self.cuda_devices = tuple(torch.device(d) for d in self.device_ids if d.startswith("cuda"))
        self.checkpoint_dir = checkpoint_dir
        # False on tensor-parallel helper ranks: rank 0 alone writes checkpoint files.
        self.persist_checkpoints = True
        # LoRA adapters of the entry, when the host can apply them (`worker.hosting` sets it).
        self.adapters: AdapterCache | None = None
        # Latent previews (None when the registry entry turns them off).
        self.previewer = latent_previewer(spec, pipeline)
        pipeline.set_progress_bar_config(disable=True)

    # Family hooks -------------------------------------------------------------------

    def validate(self, jobs: list[JobParams]) -> str | None:
        """A reason the jobs cannot run on this model, or None."""
        return None

    def refusal(self, job: JobParams) -> str | None:
        """Why this one job cannot run on this model, or None; the batch's others still run."""
        return None

    def group_key(self, job: JobParams) -> tuple[Any, ...]:
        """Jobs with different keys run in separate pipeline calls."""
        return ()

    def generate(
        self,
        jobs: list[JobParams],
        generators: list[torch.Generator],
        latents: torch.Tensor | None,
        tracker: StepTracker,
    ) -> Any:
        raise NotImplementedError

    def encode(self, output: Any, index: int, job: JobParams) -> tuple[bytes, str]:
        raise NotImplementedError

    @property
    def denoiser(self) -> torch.nn.Module:
        denoiser: torch.nn.Module = self.pipeline.transformer
        return denoiser

    # Batch contract -----------------------------------------------------------------

    def run_batch(self, jobs: list[JobParams], control: ControlView, emit: Emit) -> None:
        """`control` may be any object with BatchControl's read side (see parallel.sync).
        Raises DeviceGroupLost when the device broke under the batch: its unfinished jobs
        are left unreported, for the scheduler to put back in line."""
        terminals = Terminals(emit)
        lost = False
        try:
            self._run(jobs, control, terminals)
        except DeviceGroupLost:
            lost = True
            raise
        except Exception as exc:
            if device_lost(exc, self.device_ids):
                lost = True
                raise lost_devices(self.spec.name, self.device_ids, exc) from exc
            unended = [job.job_id for job in jobs if not terminals.has(job.job_id)]
            log_failed_jobs(log, self.spec.name, unended, exc)
            for job_id in unended:
                terminals.send(job_id, _failed(job_id, exc))
        finally:
            if not lost:
                for job in jobs:
                    terminals.send(
                        job.job_id,
                        JobFailed(job.job_id, StatusCode.INTERNAL, "no result produced"),
                    )

    def close(self) -> None:
        self.pipeline = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _run(self, jobs: list[JobParams], control: ControlView, terminals: Terminals) -> None:
        refused = {job.job_id: reason for job in jobs if (reason := self.refusal(job))}
        for job_id, reason in refused.items():
            terminals.send(job_id, JobFailed(job_id, StatusCode.INVALID_ARGUMENT, reason))
        jobs = [job for job in jobs if job.job_id not in refused]
        if not jobs:
            return
        problem = _shape_mismatch(jobs) or self.validate(jobs)
        if problem:
            for job in jobs:
                terminals.send(
                    job.job_id, JobFailed(job.job_id, StatusCode.INVALID_ARGUMENT, problem)
                )
            return
        for group, checkpoints in self._plan(jobs, terminals):
            self._run_group(group, checkpoints, control, terminals)

    def _plan(
        self, jobs: list[JobParams], terminals: Terminals
    ) -> list[tuple[list[JobParams], list[Checkpoint] | None]]:
        """Resumed groups first (they hold the oldest work), then fresh ones."""
        resumed: dict[tuple[Any, ...], list[tuple[JobParams, Checkpoint]]] = defaultdict(list)
        fresh: dict[tuple[Any, ...], list[JobParams]] = defaultdict(list)
        for job in jobs:
            if job.resume_checkpoint:
                try:
                    checkpoint = read_checkpoint(job.resume_checkpoint, self.spec.name, job)
                except CheckpointError as exc:
                    log.warning("job %s restarts from step 0: %s", job.job_id, exc)
                    message = (
                        f"its checkpoint could not be used ({exc.reason}); restarted from step 0"
                    )
                    terminals.emit(JobNotice(job.job_id, "restarted", message))
                else:
                    terminals.emit(
                        JobNotice(job.job_id, "resumed", f"resuming at step {checkpoint.step + 1}")
                    )
                    key = (checkpoint.step, job.generation.adapters, *self.group_key(job))
                    resumed[key].append((job, checkpoint))
                    continue
            # The scheduler never mixes adapter sets in a batch; a group is one set anyway.
            fresh[(job.generation.adapters, *self.group_key(job))].append(job)
        plan: list[tuple[list[JobParams], list[Checkpoint] | None]] = []
        for pairs in resumed.values():
            plan.append(([job for job, _ in pairs], [c for _, c in pairs]))
        plan.extend((group, None) for group in fresh.values())
        return plan

    def _run_group(
        self,
        jobs: list[JobParams],
        checkpoints: list[Checkpoint] | None,
        control: ControlView,
        terminals: Terminals,
    ) -> None:
        # Tensor-parallel ranks agree on cancel/preempt flags at every decision point.
        sync = getattr(control, "sync", None)
        if sync is not None:
            sync()
        waiting = []
        for index, job in enumerate(jobs):
            step = checkpoints[index].step if checkpoints else 0
            if control.is_cancelled(job.job_id):
                failure = JobFailed(job.job_id, StatusCode.CANCELLED, f"cancelled at step {step}")
                terminals.send(job.job_id, failure)
            elif control.preempt_requested:
                # Nothing ran yet: the job goes back with the checkpoint it came with, if any.
                reference = job.resume_checkpoint if checkpoints else ""
                back = JobPreempted(job.job_id, reference or "", step, wrote_checkpoint=False)
                terminals.send(job.job_id, back)
            else:
                waiting.append(index)
        if not waiting:
            return
        jobs = [jobs[i] for i in waiting]
        checkpoints = [checkpoints[i] for i in waiting] if checkpoints else None
        generators = [torch.Generator("cpu").manual_seed(job.generation.seed) for job in jobs]
        if checkpoints:
            for generator, checkpoint in zip(generators, checkpoints, strict=True):
                generator.set_state(checkpoint.generator_state)
        tracker = StepTracker(
            model=self.spec.name,
            jobs=jobs,
            generators=generators,
            control=control,
            terminals=terminals,
            checkpoint_dir=self.checkpoint_dir,
            scheduler=self.pipeline.scheduler,
            start_step=checkpoints[0].step if checkpoints else 0,
            persist=self.persist_checkpoints,
            on_boundary=sync,
            previewer=self.previewer,
            pipeline=self.pipeline,
            timing_devices=self.cuda_devices,
        )
        hook = self.denoiser.register_forward_pre_hook(tracker.mark_step_start)
        output: Any = None
        out_of_memory: BaseException | None = None
        error: BaseException | None = None
        try:
            use_device(control, True)
            output = self._generate(jobs, generators, checkpoints, tracker)
        except BatchCancelled:
            return
        except Exception as exc:
            if is_out_of_memory(exc):
                # Without its traceback: the frames it holds keep the attempt's tensors alive.
                out_of_memory = exc.with_traceback(None)
            else:
                error = exc
        finally:
            hook.remove()
        out_of_memory, error = _agree_across_ranks(control, out_of_memory, error)
        if error is not None:
            self._fail_group(jobs, terminals, error)
            return
        if out_of_memory is not None:
            # After the attempt: its step hook is gone and its tensors can be freed.
            del tracker, output
            retry_in_halves(
                self.spec.name,
                self.device,
                jobs,
                checkpoints,
                terminals,
                out_of_memory,
                lambda half, saved: self._run_group(half, saved, control, terminals),
            )
            return
        # Encoding needs no device: the next batch waiting on this worker starts meanwhile.
        use_device(control, False)
        for index, job in enumerate(jobs):
            if not tracker.live[index]:
                continue
            try:
                data, mime = self.encode(output, index, job)
            except Exception as exc:
                self._raise_if_lost(exc)
                log_failed_jobs(log, self.spec.name, [job.job_id], exc)
                terminals.send(job.job_id, _failed(job.job_id, exc))
                continue
            tracker.discard_periodic(job.job_id)
            terminals.send(job.job_id, JobFinished(job.job_id, data, mime, job.generation.seed))

    def _fail_group(self, jobs: list[JobParams], terminals: Terminals, exc: BaseException) -> None:
        self._raise_if_lost(exc)
        log_failed_jobs(log, self.spec.name, [job.job_id for job in jobs], exc)
        for job in jobs:
            terminals.send(job.job_id, _failed(job.job_id, exc))

    def _raise_if_lost(self, exc: BaseException) -> None:
        """A broken device is the worker's fault, never the jobs': it must not fail them."""
        if device_lost(exc, self.device_ids):
            raise lost_devices(self.spec.name, self.device_ids, exc) from exc

    def _generate(
        self,
        jobs: list[JobParams],
        generators: list[torch.Generator],
        checkpoints: list[Checkpoint] | None,
        tracker: StepTracker,
    ) -> Any:
        self._apply_adapters(jobs[0].generation.adapters)
        call_hooks.before_call(self.spec.name, jobs)
        if not checkpoints:
            output = self.generate(jobs, generators, None, tracker)
        else:
            state = merge_scheduler_states([c.scheduler_state for c in checkpoints])
            latents = torch.cat([c.latents for c in checkpoints]).to(self.device)
            with resume_schedule(self.pipeline.scheduler, state, self.device):
                output = self.generate(jobs, generators, latents, tracker)
        call_hooks.after_call(self.spec.name, jobs)
        return output

    def _apply_adapters(self, adapters: tuple[AdapterScale, ...]) -> None:
        if self.adapters is not None:
            self.adapters.activate(adapters)
        elif adapters:
            raise AdapterLoadError(
                f"model {self.spec.name!r} cannot apply LoRA adapters in "
                f"{self.spec.parallelism.mode} mode"
            )


def _agree_across_ranks(
    control: ControlView, out_of_memory: BaseException | None, failure: BaseException | None
) -> tuple[BaseException | None, BaseException | None]:
    """In a tensor- or context-parallel group, every rank takes the same way out of an
    attempt: one that split or stopped alone would wait in a collective its peers never
    join. A failure anywhere fails the group; otherwise an out-of-memory anywhere splits it.
    A data-mode control has no `agree_on_outcome`, and the attempt's own outcome stands."""
    agree = getattr(control, "agree_on_outcome", None)
    if agree is None:
        return out_of_memory, failure
    any_out_of_memory, any_failure = agree(out_of_memory is not None, failure is not None)
    if any_failure:
        return None, failure or RuntimeError("another rank of the group failed this batch")
    if any_out_of_memory:
        return out_of_memory or RuntimeError("another rank of the group ran out of memory"), None
    return None, None


def use_device(control: ControlView, needed: bool) -> None:
    """Take the device back (`needed`) or let other batches have it (BatchControl's
    enter_device and leave_device); a control without a device gate has neither."""
    switch = getattr(control, "enter_device" if needed else "leave_device", None)
    if switch is not None:
        switch()


def _shape_mismatch(jobs: list[JobParams]) -> str | None:
    first = jobs[0]
    for field in SHARED_FIELDS:
        values = {getattr(job.generation, field) for job in jobs}
        if len(values) > 1:
            return f"jobs of one batch must share {field}, got {sorted(values)}"
    if first.generation.steps < 1:
        return "steps must be at least 1"
    return None


def _failed(job_id: str, exc: BaseException) -> JobFailed:
    """A job ended by `exc`: a MeshError (an adapter that fits no layer) keeps its status and
    words, as the mesh's own errors do; anything else is INTERNAL, with where it was raised."""
    if isinstance(exc, MeshError):
        return JobFailed(job_id, exc.code, exc.message)
    return JobFailed(job_id, StatusCode.INTERNAL, _describe(exc))


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    place = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{place}"
