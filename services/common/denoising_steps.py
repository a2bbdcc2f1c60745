"""How many denoising steps a job with an input image runs: only the tail of its schedule
when its strength is below 1, counted as its pipeline counts them. Pure, so that the gateway,
the scheduler's core and the worker all count alike."""

from __future__ import annotations

# Pipelines that start an image-input job `int(steps - steps * strength)` steps into the
# schedule (their `get_timesteps` keeps `steps * strength` fractional), so they run
# `steps - int(steps - steps * strength)` steps: 4 at 0.6 are 3. Every other pipeline (SDXL,
# SD 1.x and their kin) runs `int(steps * strength)`: 4 at 0.6 are 2.
FRACTIONAL_START = frozenset(
    {
        "FluxImg2ImgPipeline",
        "FluxInpaintPipeline",
        "FluxFillPipeline",
        "FluxControlImg2ImgPipeline",
        "FluxControlInpaintPipeline",
        "FluxControlNetImg2ImgPipeline",
        "FluxControlNetInpaintPipeline",
        "FluxKontextInpaintPipeline",
        "Flux2KleinInpaintPipeline",
        "StableDiffusion3Img2ImgPipeline",
        "StableDiffusion3InpaintPipeline",
        "StableDiffusion3PAGImg2ImgPipeline",
        "ChromaImg2ImgPipeline",
        "ChromaInpaintPipeline",
        "QwenImageImg2ImgPipeline",
        "QwenImageInpaintPipeline",
        "QwenImageEditInpaintPipeline",
        "ZImageImg2ImgPipeline",
        "ZImageInpaintPipeline",
        "SanaSprintImg2ImgPipeline",
        "VisualClozeGenerationPipeline",
    }
)


def denoising_steps(pipeline: str, steps: int, strength: float) -> int:
    """The denoising steps a job runs, as its pipeline counts them: `steps`, or for a job
    with an input image and a strength below 1 only the tail of its schedule (the count
    `check_strength` holds to at least 1; 0 when `strength` is 0 means no strength)."""
    if not 0 < strength < 1:
        return steps
    if pipeline in FRACTIONAL_START:
        return steps - int(max(steps - steps * strength, 0))
    return min(int(steps * strength), steps)
