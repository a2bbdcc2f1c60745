"""A model without torch: one StepDone per step and a solid-colour image, for overhead tests."""

from __future__ import annotations

import time
import zlib

import numpy as np

from mediamesh.common.errors import StatusCode
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobFinished, JobParams, Preview, StepDone
from mediamesh.worker.core import call_hooks
from mediamesh.worker.core.batch import ControlView, Emit
from mediamesh.worker.models.encode import encode_result
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.preview_image import encode_rgb, preview_size
from mediamesh.worker.models.progress import Terminals


def seed_colour(seed: int) -> tuple[int, int, int]:
    packed = zlib.crc32(seed.to_bytes(8, "little", signed=True)) & 0xFFFFFF
    return (packed >> 16) & 0xFF, (packed >> 8) & 0xFF, packed & 0xFF


class EchoHost:
    """Preemption is not modelled: a batch finishes in microseconds, sooner than a handover."""

    def __init__(self, spec: ModelSpec, device: str) -> None:
        if spec.adapters:
            # Echo has no weights to adapt: accepting them would apply nothing, silently.
            raise ModelLoadError(
                f"model {spec.name!r} field adapters: the builtin Echo cannot apply LoRA "
                "adapters; remove `adapters` from the entry"
            )
        self.spec = spec
        self.device_ids = [device]

    def run_batch(self, jobs: list[JobParams], control: ControlView, emit: Emit) -> None:
        terminals = Terminals(emit)
        try:
            self._run(jobs, control, terminals)
        except Exception as exc:
            for job in jobs:
                terminals.send(job.job_id, JobFailed(job.job_id, StatusCode.INTERNAL, str(exc)))

    def _run(self, jobs: list[JobParams], control: ControlView, terminals: Terminals) -> None:
        call_hooks.before_call(self.spec.name, jobs)
        live = list(jobs)
        steps = max((job.generation.steps for job in jobs), default=0)
        for step in range(1, steps + 1):
            started = time.perf_counter()
            for job in list(live):
                if control.is_cancelled(job.job_id):
                    live.remove(job)
                    message = f"cancelled at step {step - 1}"
                    terminals.send(job.job_id, JobFailed(job.job_id, StatusCode.CANCELLED, message))
            elapsed = time.perf_counter() - started
            with terminals.together():
                for job in live:
                    if step <= job.generation.steps:
                        preview = self._preview(job, step)
                        total = job.generation.steps
                        terminals.emit(StepDone(job.job_id, step, total, elapsed, preview))
        for job in live:
            asked = job.generation
            width = asked.width or self.spec.defaults.width or 16
            height = asked.height or self.spec.defaults.height or 16
            pixels = np.empty((height, width, 3), dtype=np.uint8)
            pixels[:] = seed_colour(asked.seed)
            data, mime_type = encode_result(self.spec, pixels, asked)
            terminals.send(job.job_id, JobFinished(job.job_id, data, mime_type, asked.seed))

    def _preview(self, job: JobParams, step: int) -> Preview | None:
        # The result's own colour: Echo has no latents, but its callers test the stream.
        every = job.generation.preview_every_steps
        if not self.spec.preview.enabled or every <= 0 or step % every:
            return None
        width, height = preview_size(job.generation.width or 16, job.generation.height or 16)
        pixels = np.empty((height, width, 3), dtype=np.uint8)
        pixels[:] = seed_colour(job.generation.seed)
        return encode_rgb(pixels, (width, height))

    def close(self) -> None:
        return None
