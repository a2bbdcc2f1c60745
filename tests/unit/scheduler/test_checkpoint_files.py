"""Which checkpoint files an ended job may have left: none to look for when its one attempt
reported no checkpoint; every name its steps allow otherwise, in each folder seen."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mediamesh.common.checkpoint_files import checkpoint_files
from mediamesh.common.generation import GenerationParams
from mediamesh.scheduler.checkpoints import CheckpointFiles
from mediamesh.scheduler.core.jobs import Job, JobState, Priority

DEFAULT = Path("/ckpt")


def ended(**changes: object) -> Job:
    job = Job("j", "t", "flux-tiny", "image", Priority.BATCH, GenerationParams("x", steps=4), 0.0)
    return dataclasses.replace(job, **{"state": JobState.SUCCEEDED, "attempts": 1, **changes})


def test_one_attempt_that_reported_no_checkpoint_left_none() -> None:
    assert CheckpointFiles(DEFAULT).files_of_ended(ended()) == []
    assert CheckpointFiles(DEFAULT).files_of_ended(ended(attempts=0)) == []


def test_a_reported_checkpoint_a_second_attempt_or_a_lost_worker_means_look_everywhere() -> None:
    every_name = checkpoint_files(DEFAULT, "j", 4)
    assert every_name
    for job in (ended(attempts=2), ended(worker_losses=1)):
        assert CheckpointFiles(DEFAULT).files_of_ended(job) == every_name

    files = CheckpointFiles(DEFAULT)
    files.seen(ended(checkpoint="/elsewhere/j-step2.pt"))
    found = files.files_of_ended(ended())
    assert set(found) == {*every_name, *checkpoint_files(Path("/elsewhere"), "j", 4)}
    # Forgotten once reported: a second end of the same id finds nothing to look for.
    assert files.files_of_ended(ended()) == []
