"""A job with a strength counts the steps of its own call, whatever ran before it.

An img2img or inpainting loop runs only the tail of the schedule, and how long that tail
is depends on the job's steps and strength (and the family's rounding). The count used to
be read from the pipeline object before the call, where it still held the previous call's:
a job after a shorter one lost its extra steps' events (and their previews, preempt, pause
and checkpoint points), and a job after a longer one reported the wrong total.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from wm_helpers import job_for, of, run

from mediamesh.common.generation import InputImage
from mediamesh.common.input_refs import inline_ref
from mediamesh.common.work import JobFinished, StepDone
from tests.input_media import image_bytes, mask_bytes

# (steps, strength) in the order they run on one host: each differs from the one before.
SEQUENCE = [(4, 1.0), (4, 0.5), (4, 1.0), (10, 0.9), (10, 0.55), (4, 0.6), (6, 1.0)]


def sdxl_steps(steps: int, strength: float) -> int:
    # StableDiffusionXLImg2ImgPipeline.get_timesteps: the kept steps are rounded down.
    return min(int(steps * strength), steps)


def flux_steps(steps: int, strength: float) -> int:
    # FluxImg2ImgPipeline.get_timesteps: the skipped steps are rounded down (so 10 at 0.55
    # keeps 6 where SDXL keeps 5; README: "4 steps at 0.6 are 3 on Flux, 2 on SDXL").
    return steps - int(max(steps - min(steps * strength, steps), 0))


MODELS = {
    "sdxl-img2img-tiny": (sdxl_steps, False),
    "sdxl-inpaint-tiny": (sdxl_steps, True),
    "flux-img2img-tiny": (flux_steps, False),
}


def _input(data: bytes) -> InputImage:
    return InputImage(hashlib.sha256(data).hexdigest(), 64, 64, "image/png", inline_ref(data))


def test_expected_counts_differ_by_family() -> None:
    # What the sequence exercises: family rounding, not only the job's own numbers.
    assert [sdxl_steps(s, x) for s, x in SEQUENCE] == [4, 2, 4, 9, 5, 2, 6]
    assert [flux_steps(s, x) for s, x in SEQUENCE] == [4, 2, 4, 9, 6, 3, 6]


@pytest.mark.parametrize("model", list(MODELS))
def test_each_job_reports_the_steps_of_its_own_call(host_for, model: str) -> None:
    host = host_for(model)
    expected_steps, masked = MODELS[model]
    image = _input(image_bytes(color=(200, 60, 30)))
    inputs: dict[str, Any] = {"image": image}
    if masked:
        inputs["mask_image"] = _input(mask_bytes())
    # The denoiser's calls are the loop's real steps (one per step: Euler, and the
    # conditional and unconditional halves go through in one batch).
    calls: list[int] = []
    hook = host.denoiser.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        for number, (steps, strength) in enumerate(SEQUENCE):
            job_id = f"{model}-{number}"
            calls.clear()
            job = job_for(host.spec, job_id, 7, steps=steps, strength=strength, **inputs)
            events = run(host, [job])
            ran = len(calls)
            expected = expected_steps(steps, strength)
            assert ran == expected, (job_id, steps, strength)
            done = of(events, job_id, StepDone)
            assert [(e.step, e.total_steps) for e in done] == [
                (step, expected) for step in range(1, expected + 1)
            ], (job_id, steps, strength)
            assert len(of(events, job_id, JobFinished)) == 1, events
    finally:
        hook.remove()


def test_flux_runs_one_step_where_sdxl_would_run_none(host_for) -> None:
    # 4 steps at 0.1: the gateway admits this for Flux (check_strength), so the pipeline
    # must really denoise once and report one step.
    host = host_for("flux-img2img-tiny")
    calls: list[int] = []
    hook = host.denoiser.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        image = _input(image_bytes(color=(20, 160, 90)))
        job = job_for(host.spec, "flux-low-strength", 7, steps=4, strength=0.1, image=image)
        events = run(host, [job])
    finally:
        hook.remove()
    assert len(calls) == 1
    assert [(e.step, e.total_steps) for e in of(events, "flux-low-strength", StepDone)] == [(1, 1)]
    assert len(of(events, "flux-low-strength", JobFinished)) == 1
