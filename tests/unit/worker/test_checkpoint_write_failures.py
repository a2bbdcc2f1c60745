"""A checkpoint is insurance: one that cannot be written (a full disk, a quota, the folder
replaced by a file) is logged and never fails the job. A periodic save keeps the job's last
good checkpoint and the batch goes on; a preemption still hands the job back, from its last
good checkpoint or from step 0. No half-written file is left behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import mediamesh.worker.models.checkpoint as checkpoint_module
from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobCheckpointed, JobParams, JobPreempted, StepDone
from mediamesh.worker.core.batch import BatchCancelled, BatchControl
from mediamesh.worker.models.checkpoint import Checkpoint, write_checkpoint
from mediamesh.worker.models.progress import StepTracker, Terminals


class Schedule:
    def __init__(self) -> None:
        self.timesteps = torch.tensor([4.0, 3.0, 2.0, 1.0])
        self._step_index = 0


class DiskFull:
    """torch.save on a full disk: part of the file written, then an error."""

    def __init__(self) -> None:
        self.full = False
        self.save = torch.save

    def __call__(self, payload: Any, file: Any) -> None:
        if not self.full:
            self.save(payload, file)
            return
        file.write(b"\x00" * 64)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> DiskFull:
    disk = DiskFull()
    monkeypatch.setattr(checkpoint_module.torch, "save", disk)
    return disk


def _tracker(directory: Path, events: list[Any], every: int = 0, **more: Any) -> StepTracker:
    job = JobParams("a", GenerationParams("x", steps=4), checkpoint_every_steps=every)
    if "resume_checkpoint" in more:
        job = JobParams("a", job.generation, more.pop("resume_checkpoint"), every)
    return StepTracker(
        model="m",
        jobs=[job],
        generators=[torch.Generator().manual_seed(0)],
        control=BatchControl(["a"]),
        terminals=Terminals(events.append),
        checkpoint_dir=directory,
        scheduler=Schedule(),
        **more,
    )


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, disk: DiskFull) -> None:
    disk.full = True
    path = tmp_path / "a-step1.pt"
    checkpoint = Checkpoint(
        "m",
        JobParams("a", GenerationParams("x")),
        1,
        4,
        torch.ones(1, 2),
        {"_step_index": 1},
        torch.Generator().get_state(),
        torch.ones(3),
    )
    with pytest.raises(RuntimeError, match="enforce fail"):
        write_checkpoint(path, checkpoint)
    assert _files(tmp_path) == []


def test_a_failed_periodic_save_keeps_the_last_checkpoint_and_goes_on(
    tmp_path: Path, disk: DiskFull, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[Any] = []
    tracker = _tracker(tmp_path, events, every=1)
    tracker.on_step(0, torch.zeros(1, 4))
    disk.full = True
    with caplog.at_level(logging.WARNING, logger="mediamesh.worker.models.progress"):
        tracker.on_step(1, torch.zeros(1, 4))
    assert [type(e) for e in events] == [StepDone, JobCheckpointed, StepDone]
    assert tracker.periodic == {"a": tmp_path / "a-step1.pt"}
    assert _files(tmp_path) == ["a-step1.pt"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "a-step2.pt") in line and "enforce fail" in line


def test_a_failed_preemption_write_hands_the_job_back_from_its_last_checkpoint(
    tmp_path: Path, disk: DiskFull
) -> None:
    events: list[Any] = []
    tracker = _tracker(tmp_path, events, every=1)
    tracker.on_step(0, torch.zeros(1, 4))
    disk.full = True
    tracker.control.preempt()
    with pytest.raises(BatchCancelled):
        tracker.on_step(1, torch.zeros(1, 4))
    last = str(tmp_path / "a-step1.pt")
    assert events[-1] == JobPreempted("a", last, 1, wrote_checkpoint=False)
    assert _files(tmp_path) == ["a-step1.pt"]  # kept: the job resumes from it


def test_a_failed_preemption_write_without_a_checkpoint_restarts_the_job(
    tmp_path: Path,
) -> None:
    # The checkpoints folder replaced by a plain file.
    folder = tmp_path / "checkpoints"
    folder.write_text("not a folder")
    events: list[Any] = []
    tracker = _tracker(folder, events)
    tracker.control.preempt()
    with pytest.raises(BatchCancelled):
        tracker.on_step(0, torch.zeros(1, 4))
    assert events[-1] == JobPreempted("a", "", 0, wrote_checkpoint=False)


def test_a_resumed_job_whose_preemption_write_fails_keeps_the_checkpoint_it_came_with(
    tmp_path: Path, disk: DiskFull
) -> None:
    events: list[Any] = []
    came_with = str(tmp_path / "a-step2.pt")
    tracker = _tracker(tmp_path, events, resume_checkpoint=came_with, start_step=2)
    disk.full = True
    tracker.control.preempt()
    with pytest.raises(BatchCancelled):
        tracker.on_step(0, torch.zeros(1, 4))  # step 3 of 4
    assert events[-1] == JobPreempted("a", came_with, 2, wrote_checkpoint=False)
