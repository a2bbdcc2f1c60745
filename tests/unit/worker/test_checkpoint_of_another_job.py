"""A checkpoint resumes only the job that wrote it, with the request that made it: another
job's file under this job's name (copied, a reused name) restarts the job from step 0, as an
unreadable one does. The restarted notice tells the caller why in a few words, without the
server's paths or torch's advice to load the file unsafely; the worker logs the detail."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from mediamesh.common.generation import AdapterScale, GenerationParams, InputImage
from mediamesh.common.work import JobNotice, JobParams
from mediamesh.worker.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_path,
    read_checkpoint,
    write_checkpoint,
)
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.progress import Terminals

IMAGE = InputImage(sha256="ab" * 32, width=64, height=64, mime_type="image/png", ref="in-1")
GENERATION = GenerationParams(
    "a red fox",
    negative_prompt="blur",
    steps=4,
    seed=3,
    width=64,
    height=64,
    guidance_scale=3.5,
    image=IMAGE,
    strength=0.6,
    adapters=(AdapterScale("ink", 0.8),),
)


def _written(directory: Path, job: JobParams, model: str = "m") -> Path:
    path = checkpoint_path(directory, job.job_id, 2)
    write_checkpoint(
        path,
        Checkpoint(
            model=model,
            job=job,
            step=2,
            total_steps=job.generation.steps,
            latents=torch.ones(1, 3),
            scheduler_state={"_step_index": 2},
            generator_state=torch.Generator().manual_seed(1).get_state(),
            remaining_timesteps=torch.tensor([2.0, 1.0]),
        ),
    )
    return path


def _changed(job: JobParams, **generation: Any) -> JobParams:
    return dataclasses.replace(job, generation=dataclasses.replace(job.generation, **generation))


def test_a_checkpoint_of_another_job_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path, JobParams("x", GENERATION))
    with pytest.raises(CheckpointError, match="belongs to job 'x'") as caught:
        read_checkpoint(str(path), "m", JobParams("c", GENERATION))
    assert caught.value.reason == "it belongs to another job"


@pytest.mark.parametrize(
    "change",
    [
        {"prompt": "a blue fox"},
        {"negative_prompt": ""},
        {"guidance_scale": 7.0},
        {"adapters": ()},
        {"adapters": (AdapterScale("ink", 0.5),)},
        {"strength": 0.7},
        {"image": dataclasses.replace(IMAGE, sha256="cd" * 32)},
        {"use_cache": False},
    ],
)
def test_a_checkpoint_made_with_another_request_is_refused(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    job = JobParams("j", GENERATION)
    path = _written(tmp_path, job)
    (field,) = change
    with pytest.raises(CheckpointError, match=f"different {field}$"):
        read_checkpoint(str(path), "m", _changed(job, **change))


def test_what_only_encodes_the_result_may_differ(tmp_path: Path) -> None:
    job = JobParams("j", GENERATION)
    path = _written(tmp_path, job)
    encoded_otherwise = _changed(
        job,
        output_format="webp",
        output_quality=70,
        preview_every_steps=1,
        # The same picture, kept under another name in the scheduler's store.
        image=dataclasses.replace(IMAGE, ref="in-2"),
    )
    assert read_checkpoint(str(path), "m", encoded_otherwise).step == 2


def _host() -> DiffusionHost:
    """A DiffusionHost without a pipeline: enough for its resume plan."""
    host = DiffusionHost.__new__(DiffusionHost)
    host.spec = type("Spec", (), {"name": "m"})()  # type: ignore[assignment]
    return host


def _restart_notice(job: JobParams) -> JobNotice:
    events: list[Any] = []
    plan = _host()._plan([job], Terminals(events.append))
    assert plan == [([job], None)]  # runs from step 0
    (notice,) = events
    assert isinstance(notice, JobNotice) and notice.kind == "restarted"
    return notice


def test_a_job_given_another_jobs_checkpoint_restarts_from_step_0(tmp_path: Path) -> None:
    other = _written(tmp_path, JobParams("x", GENERATION))
    mine = checkpoint_path(tmp_path, "c", 2)
    mine.write_bytes(other.read_bytes())  # cp x-step2.pt c-step2.pt
    notice = _restart_notice(JobParams("c", GENERATION, resume_checkpoint=str(mine)))
    assert notice.message == (
        "its checkpoint could not be used (it belongs to another job); restarted from step 0"
    )


def test_the_restarted_notice_names_no_path_nor_torchs_advice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = checkpoint_path(tmp_path, "j", 2)
    torch.save({"payload": object()}, garbage)  # weights_only refuses to load it
    with caplog.at_level(logging.WARNING, logger="mediamesh.worker.models.diffusion"):
        notice = _restart_notice(JobParams("j", GENERATION, resume_checkpoint=str(garbage)))
    assert notice.message == (
        "its checkpoint could not be used (not a checkpoint this worker wrote); "
        "restarted from step 0"
    )
    # The detail stays on the worker, in its log.
    (line,) = [r.getMessage() for r in caplog.records if "restarts from step 0" in r.message]
    assert f"checkpoint {garbage} is unreadable" in line
