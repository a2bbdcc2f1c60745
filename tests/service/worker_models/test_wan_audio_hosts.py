"""wan-tiny and stable-audio-tiny: outputs decode, preempt/resume reproduces the result."""

from __future__ import annotations

import io
import wave

import imageio_ffmpeg
import pytest
from wm_helpers import job_for, of, run

from mediamesh.common.work import JobFailed, JobFinished, JobNotice, JobPreempted, StepDone


def _preempt_at(step: int):
    def hook(event, control) -> None:
        if isinstance(event, StepDone) and event.step == step:
            control.preempt()

    return hook


@pytest.mark.parametrize("name", ["wan-tiny", "stable-audio-tiny"])
def test_preempt_at_step_two_then_resume_matches_uninterrupted(host_for, name) -> None:
    host = host_for(name)
    job = job_for(host.spec, "p", seed=9)
    (reference,) = of(run(host, [job]), "p", JobFinished)
    (preempted,) = of(run(host, [job], _preempt_at(2)), "p", JobPreempted)
    assert preempted.step == 2
    resumed = job_for(host.spec, "p", seed=9, resume_checkpoint=preempted.checkpoint)
    events = run(host, [resumed])
    assert isinstance(events[0], JobNotice) and events[0].kind == "resumed"
    assert [e.step for e in of(events, "p", StepDone)] == [3, 4]
    assert of(events, "p", JobFinished)[0].data == reference.data


def test_wan_returns_mp4_with_requested_frames(host_for, tmp_path) -> None:
    host = host_for("wan-tiny")
    (finished,) = of(run(host, [job_for(host.spec, "v", num_frames=9)]), "v", JobFinished)
    assert finished.mime_type == "video/mp4"
    video = tmp_path / "v.mp4"
    video.write_bytes(finished.data)
    frames, _seconds = imageio_ffmpeg.count_frames_and_secs(str(video))
    assert frames == 9


def test_wan_rejects_frame_counts_off_the_temporal_grid(host_for) -> None:
    host = host_for("wan-tiny")
    (failed,) = run(host, [job_for(host.spec, "v", num_frames=6)])
    assert isinstance(failed, JobFailed) and failed.code == "INVALID_ARGUMENT"
    assert "(num_frames - 1) % 4 == 0" in failed.message


def test_audio_durations_run_apart_and_decode_to_length(host_for) -> None:
    host = host_for("stable-audio-tiny")
    jobs = [job_for(host.spec, "short", duration_s=0.5), job_for(host.spec, "long", duration_s=2)]
    events = run(host, jobs)
    for job in jobs:
        (finished,) = of(events, job.job_id, JobFinished)
        assert finished.mime_type == "audio/wav"
        with wave.open(io.BytesIO(finished.data)) as reader:
            assert reader.getsampwidth() == 2 and reader.getnchannels() == 2
            seconds = reader.getnframes() / reader.getframerate()
        assert seconds == pytest.approx(job.generation.duration_s, abs=0.01)
