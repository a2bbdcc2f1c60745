"""What a drain says it stops: the jobs it checkpoints, not those past their last step
(they finish on this worker); and a job handed back unstarted writes no checkpoint, so it
is not counted as one."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFinished, JobParams, JobPreempted, StepDone
from mediamesh.worker.core.batch import BatchControl, Emit
from mediamesh.worker.runtime import WorkerRuntime


class TwoJobHost:
    """Job `done` has run its last step and is encoding; job `mid` is at step 1 of 3."""

    def __init__(self) -> None:
        spec = load_registry().get("echo")
        assert spec is not None
        self.spec = spec
        self.device_ids = ["cpu"]
        self.stepped = threading.Event()

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        emit(StepDone("done", 2, 2, 0.01))
        emit(StepDone("mid", 1, 3, 0.01))
        self.stepped.set()
        for _ in range(1000):  # bounded: a failed test must not hang in close()
            if control.preempt_requested:
                break
            threading.Event().wait(0.01)
        emit(JobFinished("done", b"png", "image/png", 1))
        emit(JobPreempted("mid", "/ckpt/mid-step1.pt", 1))

    def close(self) -> None:
        return None


def job(job_id: str) -> JobParams:
    return JobParams(job_id, GenerationParams(prompt="x", steps=2, width=16, height=16))


def checkpoints_preempted() -> float:
    sample = "mediamesh_worker_checkpoints_total"
    return REGISTRY.get_sample_value(sample, {"reason": "preempted"}) or 0.0


async def test_a_drain_names_the_jobs_it_stops_not_those_that_finish() -> None:
    host = TwoJobHost()
    runtime = WorkerRuntime("w", "spot", {"echo": host})
    try:
        before = checkpoints_preempted()
        stream = runtime.run_batch_groups("b1", "echo", [job("done"), job("mid")])
        events = list(await anext(stream))
        while not any(isinstance(e, StepDone) and e.job_id == "mid" for e in events):
            events += await anext(stream)
        assert runtime.start_drain() == ["mid"]
        events += [e async for group in stream for e in group]
        assert {type(e) for e in events if e.job_id == "done"} == {StepDone, JobFinished}
        assert checkpoints_preempted() == before + 1
        # Sent before the scheduler heard of the drain: handed straight back, no file.
        late = [e async for e in runtime.run_batch("b2", "echo", [job("late")])]
        assert late == [JobPreempted("late", "", 0, wrote_checkpoint=False)]
        assert checkpoints_preempted() == before + 1
    finally:
        runtime.close()
