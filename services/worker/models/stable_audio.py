"""Stable Audio text-to-audio: the legacy `callback(step, t, latents)` hook, WAV output."""

from __future__ import annotations

from typing import Any

import torch

from mediamesh.common.work import JobParams
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.encode import encode_wav
from mediamesh.worker.models.progress import StepTracker


class StableAudioHost(DiffusionHost):
    def group_key(self, job: JobParams) -> tuple[Any, ...]:
        # Duration conditions the model: batching different durations would change results.
        return (job.generation.duration_s,)

    def generate(
        self,
        jobs: list[JobParams],
        generators: list[torch.Generator],
        latents: torch.Tensor | None,
        tracker: StepTracker,
    ) -> Any:
        first = jobs[0].generation

        def on_step(index: int, _t: Any, step_latents: torch.Tensor) -> None:
            tracker.on_step(index, step_latents)

        pipeline = self.pipeline
        if latents is not None:
            # The pipeline scales given latents by init_noise_sigma as if they were fresh
            # noise; a resumed row is already on the schedule, so hand it over untouched.
            resumed = latents
            pipeline.prepare_latents = lambda *_args, **_kwargs: resumed
        try:
            result = pipeline(
                prompt=[job.generation.prompt for job in jobs],
                negative_prompt=[job.generation.negative_prompt for job in jobs],
                audio_end_in_s=first.duration_s or None,
                num_inference_steps=first.steps,
                guidance_scale=first.guidance_scale,
                generator=generators,
                output_type="pt",
                callback=on_step,
                callback_steps=1,
            )
        finally:
            vars(pipeline).pop("prepare_latents", None)
        return result.audios

    def encode(self, output: Any, index: int, job: JobParams) -> tuple[bytes, str]:
        audio = output[index].float().cpu().numpy()
        return encode_wav(audio, int(self.pipeline.vae.sampling_rate)), "audio/wav"
