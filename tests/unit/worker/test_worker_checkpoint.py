"""Checkpoint files and the scheduler resume shim, on a fake multistep scheduler."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobParams
from mediamesh.worker.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_path,
    merge_scheduler_states,
    read_checkpoint,
    resume_schedule,
    snapshot_scheduler,
    write_checkpoint,
)

SHAPE = torch.Size([3, 2, 4])


class FakeMultistep:
    """Keeps a history of outputs like UniPC: resuming without it changes the result."""

    def __init__(self) -> None:
        self.config = {"order": 2}
        self.history: list[torch.Tensor | None] = [None, None]
        self.timesteps = torch.arange(4)
        self._step_index: int | None = None

    def set_timesteps(self, steps: int) -> None:
        self.timesteps = torch.arange(steps * 10, 0, -10)
        self.sigmas = torch.linspace(1, 0, steps + 1)
        self.history = [None, None]
        self._step_index = None

    def step(self, output: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        if self._step_index is None:
            self._step_index = 0
        previous = self.history[-1]
        self.history = [previous, output]
        blended = output if previous is None else (output + previous) / 2
        result = sample - self.sigmas[self._step_index] * blended
        self._step_index += 1
        return result


def _loop(scheduler: FakeMultistep, sample: torch.Tensor, stop: int | None = None):
    # Like a pipeline: take the schedule once after set_timesteps, then step through it.
    scheduler.set_timesteps(4)
    timesteps = list(scheduler.timesteps)
    for index, t in enumerate(timesteps):
        sample = scheduler.step(sample * 0.5 + t / 100, sample)
        if stop is not None and index + 1 == stop:
            break
    return sample, timesteps


def test_snapshot_cuts_batched_tensors_to_one_row_and_resume_is_exact() -> None:
    torch.manual_seed(0)
    start = torch.randn(SHAPE)
    expected, _ = _loop(FakeMultistep(), start.clone())

    interrupted = FakeMultistep()
    halfway, _ = _loop(interrupted, start.clone(), stop=2)
    rows = [snapshot_scheduler(interrupted, halfway.shape, row) for row in range(3)]
    assert rows[1]["history"][1]["__row__"].shape == (1, 2, 4)
    assert "config" not in rows[1]

    resumed = FakeMultistep()
    state = merge_scheduler_states(rows)
    with resume_schedule(resumed, state, torch.device("cpu")):
        result, seen = _loop(resumed, halfway.clone())
    assert [int(t) for t in seen] == [20, 10]
    assert torch.equal(result, expected)
    assert "step" not in vars(resumed) and "set_timesteps" not in vars(resumed)


def _checkpoint(job: JobParams, step: int = 2) -> Checkpoint:
    return Checkpoint(
        model="m",
        job=job,
        step=step,
        total_steps=job.generation.steps,
        latents=torch.ones(1, 3),
        scheduler_state={"_step_index": step},
        generator_state=torch.Generator().manual_seed(1).get_state(),
        remaining_timesteps=torch.tensor([2.0, 1.0]),
    )


def test_write_and_read_round_trip(tmp_path) -> None:
    job = JobParams("job/1", GenerationParams("p", steps=4, seed=3, width=64, height=64))
    path = checkpoint_path(tmp_path, job.job_id, 2)
    assert path.name == "job_1-step2.pt"
    write_checkpoint(path, _checkpoint(job))
    loaded = read_checkpoint(str(path), "m", job)
    assert loaded.step == 2 and loaded.job == job
    assert torch.equal(loaded.latents, torch.ones(1, 3))


@pytest.mark.parametrize(
    ("model", "change", "reason"),
    [
        ("other", {}, "belongs to model"),
        ("m", {"seed": 4}, "different seed"),
        ("m", {"steps": 8}, "different steps"),
    ],
)
def test_read_rejects_checkpoints_of_other_work(tmp_path, model, change, reason) -> None:
    job = JobParams("j", GenerationParams("p", steps=4, seed=3))
    path = checkpoint_path(tmp_path, "j", 2)
    write_checkpoint(path, _checkpoint(job))
    other = dataclasses.replace(job, generation=dataclasses.replace(job.generation, **change))
    with pytest.raises(CheckpointError, match=reason):
        read_checkpoint(str(path), model, other)


def test_read_reports_missing_and_garbage_files(tmp_path) -> None:
    job = JobParams("j", GenerationParams("p"))
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(str(tmp_path / "none.pt"), "m", job)
    garbage = tmp_path / "g.pt"
    garbage.write_bytes(b"\x00" * 10)
    with pytest.raises(CheckpointError, match="unreadable"):
        read_checkpoint(str(garbage), "m", job)
