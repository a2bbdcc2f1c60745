"""The generic pipeline host on every tiny family: steps, cancel, seeds, preempt/resume.

Tolerance for "same seed alone and in a batch": 8-bit outputs differ by at most 2 levels
and by under 0.1 level on average. The noise is identical (one generator per job); batched
matmuls round differently, which a UNet or DiT amplifies a little more than Flux does.
Video is held to 35 dB PSNR after decoding instead, because the bundled x264 does not
always encode identical frames to one bitstream (`tests.media.VIDEO_PSNR_DB`).
"""

from __future__ import annotations

import io

import diffusers
import numpy as np
import pytest
import soundfile
from PIL import Image
from wm_helpers import job_for, of, run

from mediamesh.common.work import JobFailed, JobFinished, JobNotice, JobPreempted, StepDone
from tests.media import VIDEO_PSNR_DB, psnr_db

FAMILIES = ["sdxl-tiny", "sd3-tiny", "pixart-tiny", "cogvideox-tiny", "audioldm2-tiny"]
# Every family's scheduler keeps its state in a form a checkpoint can carry (CogVideoX's
# and AudioLDM2's DDIM keep no step counter, but read only the timestep they are given).
RESUMES = {name: True for name in FAMILIES}


def _pixels(finished: JobFinished, tmp_path, name: str) -> np.ndarray:
    """Decoded samples in levels of their type: 8-bit pixels or 16-bit PCM (audio, whose
    tolerance in 16-bit levels is the same numbers, so far stricter)."""
    if finished.mime_type.startswith("audio/"):
        audio, _rate = soundfile.read(io.BytesIO(finished.data), dtype="int16")
        assert np.abs(audio).max() > 1000, "near-silent audio would compare equal anyway"
        return np.asarray(audio, dtype=np.int32)
    if finished.mime_type == "image/png":
        return np.asarray(Image.open(io.BytesIO(finished.data)).convert("RGB"), dtype=np.int16)
    import imageio_ffmpeg

    path = tmp_path / f"{name}.mp4"
    path.write_bytes(finished.data)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]
    return np.stack(frames).astype(np.int16)


@pytest.mark.parametrize("name", FAMILIES)
def test_progress_every_step_and_seed_alone_equals_batched(host_for, name, tmp_path) -> None:
    host = host_for(name)
    alone = run(host, [job_for(host.spec, "a", seed=5)])
    assert [e.step for e in of(alone, "a", StepDone)] == [1, 2, 3, 4]
    batch = run(host, [job_for(host.spec, f"b{i}", seed=5 + i) for i in range(-1, 2)])
    (single,) = of(alone, "a", JobFinished)
    (batched,) = of(batch, "b0", JobFinished)
    difference = np.abs(_pixels(single, tmp_path, "a") - _pixels(batched, tmp_path, "b"))
    if single.mime_type.startswith("video/"):
        assert psnr_db(difference) >= VIDEO_PSNR_DB, name
    else:
        assert difference.max() <= 2 and difference.mean() < 0.1, name


@pytest.mark.parametrize("name", FAMILIES)
def test_cancel_one_job_while_the_others_finish(host_for, name) -> None:
    host = host_for(name)

    def cancel_at_two(event, control) -> None:
        if isinstance(event, StepDone) and event.job_id == "x" and event.step == 2:
            control.cancel("x")

    jobs = [job_for(host.spec, job_id, seed=i) for i, job_id in enumerate(["x", "y", "z"])]
    events = run(host, jobs, cancel_at_two)
    (failed,) = of(events, "x", JobFailed)
    assert failed.code == "CANCELLED" and "step 3" in failed.message
    for job_id in ("y", "z"):
        assert len(of(events, job_id, JobFinished)) == 1
        assert [e.step for e in of(events, job_id, StepDone)] == [1, 2, 3, 4]


@pytest.mark.parametrize("name", FAMILIES)
def test_preempt_then_resume_or_restart_as_documented(host_for, name) -> None:
    host = host_for(name)
    job = job_for(host.spec, "p", seed=3)
    (reference,) = of(run(host, [job]), "p", JobFinished)

    def preempt_at_two(event, control) -> None:
        if isinstance(event, StepDone) and event.step == 2:
            control.preempt()

    (preempted,) = of(run(host, [job], preempt_at_two), "p", JobPreempted)
    assert preempted.step == 2
    again = job_for(host.spec, "p", seed=3, resume_checkpoint=preempted.checkpoint)
    events = run(host, [again])
    (notice,) = of(events, "p", JobNotice)
    if RESUMES[name]:
        assert notice.kind == "resumed"
        assert [e.step for e in of(events, "p", StepDone)] == [3, 4]
    else:
        assert notice.kind == "restarted"
        assert [e.step for e in of(events, "p", StepDone)] == [1, 2, 3, 4]
    assert of(events, "p", JobFinished)[0].data == reference.data


def _preempt_at_two(event, control) -> None:
    if isinstance(event, StepDone) and event.step == 2:
        control.preempt()


@pytest.mark.parametrize(
    ("model", "scheduler", "resumes"),
    [
        ("sdxl-tiny", "EulerAncestralDiscreteScheduler", True),
        ("sdxl-tiny", "DPMSolverMultistepScheduler", True),
        ("sdxl-tiny", "DDIMScheduler", True),
        # PNDM runs more loop iterations than steps (warm-up timesteps; Runge-Kutta ones
        # without skip_prk_steps) and keeps no step counter: exactly `steps` progress events.
        ("sdxl-tiny", "PNDMScheduler", False),
        ("pixart-tiny", "PNDMScheduler", False),
        # Second order: two model calls per step, and a step counter that counts calls.
        ("sdxl-tiny", "HeunDiscreteScheduler", False),
        # CogVideoX's DPM keeps its previous prediction in the pipeline's loop, out of reach.
        ("cogvideox-tiny", "CogVideoXDPMScheduler", False),
    ],
)
def test_schedulers_resume_exactly_or_restart(host_for, model, scheduler, resumes) -> None:
    host = host_for(model)
    original = host.pipeline.scheduler
    host.pipeline.scheduler = getattr(diffusers, scheduler).from_config(original.config)
    try:
        job = job_for(host.spec, "s", seed=11)
        (reference,) = of(run(host, [job]), "s", JobFinished)
        (preempted,) = of(run(host, [job], _preempt_at_two), "s", JobPreempted)
        again = job_for(host.spec, "s", seed=11, resume_checkpoint=preempted.checkpoint)
        events = run(host, [again])
    finally:
        host.pipeline.scheduler = original
    (notice,) = of(events, "s", JobNotice)
    assert notice.kind == ("resumed" if resumes else "restarted")
    expected = [3, 4] if resumes else [1, 2, 3, 4]
    assert [e.step for e in of(events, "s", StepDone)] == expected
    # Stochastic (ancestral) sampling continues from the saved generator state.
    assert of(events, "s", JobFinished)[0].data == reference.data
