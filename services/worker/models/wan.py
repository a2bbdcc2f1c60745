"""Wan text-to-video: frames encoded as MP4 (WebP when ffmpeg fails)."""

from __future__ import annotations

from typing import Any

import torch

from mediamesh.common.work import JobParams
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.encode import encode_video
from mediamesh.worker.models.flux import text_token_budget
from mediamesh.worker.models.progress import StepTracker


class WanHost(DiffusionHost):
    def validate(self, jobs: list[JobParams]) -> str | None:
        # The pipeline would silently round the frame count; a caller must get what it asked.
        multiple = int(getattr(self.pipeline, "vae_scale_factor_temporal", 4))
        frames = jobs[0].generation.num_frames
        if frames < 1 or (frames - 1) % multiple != 0:
            return f"{self.spec.name} needs (num_frames - 1) % {multiple} == 0, got {frames}"
        return None

    def generate(
        self,
        jobs: list[JobParams],
        generators: list[torch.Generator],
        latents: torch.Tensor | None,
        tracker: StepTracker,
    ) -> Any:
        first = jobs[0].generation

        def on_step_end(
            _pipe: Any, index: int, _t: Any, tensors: dict[str, torch.Tensor]
        ) -> dict[str, torch.Tensor]:
            tracker.on_step(index, tensors["latents"])
            return {}

        result = self.pipeline(
            prompt=[job.generation.prompt for job in jobs],
            negative_prompt=[job.generation.negative_prompt for job in jobs],
            height=first.height,
            width=first.width,
            num_frames=first.num_frames,
            num_inference_steps=first.steps,
            guidance_scale=first.guidance_scale,
            generator=generators,
            latents=latents,
            max_sequence_length=text_token_budget(self.pipeline.tokenizer),
            output_type="np",
            callback_on_step_end=on_step_end,
            callback_on_step_end_tensor_inputs=["latents"],
        )
        return result.frames

    def encode(self, output: Any, index: int, job: JobParams) -> tuple[bytes, str]:
        out = self.spec.output
        return encode_video(output[index], out.fps, out.format, out.fallback_format)
