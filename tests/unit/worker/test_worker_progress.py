"""StepTracker's decisions at step boundaries, with a stand-in scheduler."""

from __future__ import annotations

import pytest
import torch

from mediamesh.common.generation import GenerationParams
from mediamesh.common.work import JobCheckpointed, JobFailed, JobParams, JobPreempted, StepDone
from mediamesh.worker.core.batch import BatchCancelled, BatchControl
from mediamesh.worker.models.progress import StepTracker, Terminals


class Schedule:
    def __init__(self) -> None:
        self.timesteps = torch.tensor([3.0, 2.0, 1.0])
        self._step_index = 0


def _tracker(tmp_path, jobs, events, control=None) -> StepTracker:
    control = control or BatchControl([j.job_id for j in jobs])
    return StepTracker(
        model="m",
        jobs=jobs,
        generators=[torch.Generator().manual_seed(j.generation.seed) for j in jobs],
        control=control,
        terminals=Terminals(events.append),
        checkpoint_dir=tmp_path,
        scheduler=Schedule(),
    )


def test_preempt_writes_one_checkpoint_per_live_job_and_stops(tmp_path) -> None:
    jobs = [
        JobParams("a", GenerationParams("x", steps=3)),
        JobParams("b", GenerationParams("y", steps=3)),
    ]
    events: list = []
    tracker = _tracker(tmp_path, jobs, events)
    tracker.control.cancel(["b"])
    tracker.control.preempt()
    with pytest.raises(BatchCancelled):
        tracker.on_step(0, torch.zeros(2, 4))
    kinds = [(type(e).__name__, e.job_id) for e in events]
    assert kinds == [("JobFailed", "b"), ("StepDone", "a"), ("JobPreempted", "a")]
    preempted = events[-1]
    assert isinstance(preempted, JobPreempted) and preempted.step == 1
    assert (tmp_path / "a-step1.pt").is_file() and not (tmp_path / "b-step1.pt").exists()


def test_preempt_at_the_last_step_lets_the_job_finish(tmp_path) -> None:
    events: list = []
    tracker = _tracker(tmp_path, [JobParams("a", GenerationParams("x", steps=1))], events)
    tracker.control.preempt()
    tracker.on_step(0, torch.zeros(1, 4))
    assert [type(e) for e in events] == [StepDone] and tracker.live == [True]


def test_cancelled_jobs_stop_reporting_and_all_cancelled_stops_the_loop(tmp_path) -> None:
    jobs = [
        JobParams("a", GenerationParams("x", steps=3)),
        JobParams("b", GenerationParams("y", steps=3)),
    ]
    events: list = []
    tracker = _tracker(tmp_path, jobs, events)
    tracker.on_step(0, torch.zeros(2, 4))
    tracker.control.cancel(["a"])
    tracker.on_step(1, torch.zeros(2, 4))
    assert [e.job_id for e in events if isinstance(e, StepDone) and e.step == 2] == ["b"]
    tracker.control.cancel(["b"])
    with pytest.raises(BatchCancelled):
        tracker.on_step(2, torch.zeros(2, 4))
    failures = [e for e in events if isinstance(e, JobFailed)]
    assert [(e.job_id, e.message) for e in failures] == [
        ("a", "cancelled at step 2"),
        ("b", "cancelled at step 3"),
    ]


def test_periodic_checkpoints_keep_the_latest_and_the_one_before(tmp_path) -> None:
    """The one before stays until the next is written: a worker killed before the scheduler
    heard of the latest leaves it the previous one to resume from, not a deleted file."""
    events: list = []
    tracker = _tracker(
        tmp_path, [JobParams("a", GenerationParams("x", steps=7), checkpoint_every_steps=2)], events
    )
    for index in range(6):
        tracker.on_step(index, torch.zeros(1, 4))
    saved = [e for e in events if isinstance(e, JobCheckpointed)]
    assert [e.step for e in saved] == [2, 4, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-step4.pt", "a-step6.pt"]
    tracker.discard_periodic("a")  # the job ended: nothing of it is kept
    assert list(tmp_path.iterdir()) == []


def test_a_failing_sink_does_not_escape(tmp_path) -> None:
    def broken(_event) -> None:
        raise RuntimeError("queue closed")

    terminals = Terminals(broken)
    terminals.send("a", StepDone("a", 1, 1, 0.0))
    assert terminals.has("a")


def test_a_job_stopped_without_ending_keeps_its_checkpoints(tmp_path) -> None:
    """A cancel that only stops the batch (its stream to the scheduler broke, the worker
    stops) leaves the checkpoints the requeued job resumes from; one for good deletes them."""
    jobs = [
        JobParams("kept", GenerationParams("x", steps=9), checkpoint_every_steps=2),
        JobParams("ended", GenerationParams("y", steps=9), checkpoint_every_steps=2),
    ]
    events: list = []
    tracker = _tracker(tmp_path, jobs, events)
    for index in range(4):
        tracker.on_step(index, torch.zeros(2, 4))
    tracker.control.cancel(["ended"], discard_checkpoints=True)
    tracker.control.cancel(["kept"])
    with pytest.raises(BatchCancelled):
        tracker.on_step(4, torch.zeros(2, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept-step2.pt", "kept-step4.pt"]
