"""Flux text-to-image: progress through `callback_on_step_end`, PNG output."""

from __future__ import annotations

from typing import Any

import torch

from mediamesh.common.work import JobParams
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.encode import encode_png
from mediamesh.worker.models.progress import StepTracker

# Flux's T5 limit; tiny tokenizers declare fewer tokens and the pipeline pads to this.
MAX_T5_TOKENS = 512


def text_token_budget(tokenizer: Any) -> int:
    return min(MAX_T5_TOKENS, int(getattr(tokenizer, "model_max_length", MAX_T5_TOKENS)))


class FluxHost(DiffusionHost):
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
            height=first.height,
            width=first.width,
            num_inference_steps=first.steps,
            guidance_scale=first.guidance_scale,
            generator=generators,
            # Resumed jobs pass their packed latents; the pipeline uses them as-is.
            latents=latents,
            max_sequence_length=text_token_budget(self.pipeline.tokenizer_2),
            output_type="np",
            callback_on_step_end=on_step_end,
            callback_on_step_end_tensor_inputs=["latents"],
        )
        return result.images

    def encode(self, output: Any, index: int, job: JobParams) -> tuple[bytes, str]:
        return encode_png(output[index]), "image/png"
