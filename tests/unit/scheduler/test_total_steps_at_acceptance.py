"""A job with an input image and a strength below 1 is accepted with the steps it will run,
as its progress counts them: it read 0/4 while queued and then 1/3 once running."""

from __future__ import annotations

import dataclasses

from mediamesh.common.generation import InputImage
from mediamesh.scheduler.core.scheduler import Accepted

from .fakes import FakeClock, make_core, new_job

PNG = InputImage(sha256="0" * 64, width=64, height=64, mime_type="image/png")


def accepted_total_steps(model: str, strength: float, image: InputImage | None = PNG) -> int:
    core = make_core(FakeClock())
    job = new_job(model=model, steps=4)
    params = dataclasses.replace(job.params, image=image, strength=strength)
    outcome = core.submit(dataclasses.replace(job, params=params))
    assert isinstance(outcome, Accepted), outcome
    return outcome.job.total_steps


def test_the_tail_of_the_schedule_is_counted_as_each_pipeline_counts_it() -> None:
    # Flux starts a fractional step in: 4 at 0.6 are 3; SDXL rounds down: 4 at 0.6 are 2.
    assert accepted_total_steps("flux-img2img-tiny", 0.6) == 3
    assert accepted_total_steps("sdxl-img2img-tiny", 0.6) == 2
    assert accepted_total_steps("flux-img2img-tiny", 1.0) == 4


def test_a_job_without_an_input_image_runs_its_steps() -> None:
    assert accepted_total_steps("flux-tiny", 0.0, image=None) == 4
