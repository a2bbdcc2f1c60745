"""step_seconds on a GPU: CUDA runs a step's kernels after their launches return, so the step
clock waits for the device at both boundaries (the wait stood in for by a patched
synchronize that takes as long as the queued kernels would)."""

from __future__ import annotations

import time

import torch

from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobParams, StepDone
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.progress import StepTracker, Terminals

QUEUED_S = 0.05


def test_step_seconds_wait_for_the_kernels_of_the_step(tmp_path, monkeypatch) -> None:
    waits: list[torch.device] = []

    def synchronize(device: torch.device) -> None:
        # The first wait is the step's start; the second finds its kernels still queued.
        waits.append(device)
        if len(waits) == 2:
            time.sleep(QUEUED_S)

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    job = JobParams("a", GenerationParams("x", steps=2))
    events: list = []
    gpu = torch.device("cuda:1")
    tracker = StepTracker(
        model="m",
        jobs=[job],
        generators=[torch.Generator().manual_seed(0)],
        control=BatchControl(["a"]),
        terminals=Terminals(events.append),
        checkpoint_dir=tmp_path,
        scheduler=None,
        timing_devices=(gpu,),
    )
    tracker.mark_step_start()
    tracker.mark_step_start()  # the step's later denoiser calls change nothing
    tracker.on_step(0, torch.zeros(1, 4))
    (done,) = [e for e in events if isinstance(e, StepDone)]
    assert waits == [gpu, gpu]
    assert done.step_seconds >= QUEUED_S
