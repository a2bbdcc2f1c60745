"""A worker whose devices are gone stops taking work and asks to leave, and never fails the
batch's jobs for it (the scheduler puts them back in line)."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import StatusCode, Unavailable
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFailed, JobParams, JobPreempted
from mediamesh.worker.core.batch import BatchControl, DeviceGroupLost, Emit
from mediamesh.worker.runtime import WorkerRuntime


class LostGroupHost:
    """A host whose device group is gone: every batch raises, as TensorParallelHost does."""

    def __init__(self) -> None:
        spec = load_registry().get("echo")
        assert spec is not None
        self.spec = spec
        self.device_ids = ["cpu", "cpu"]
        self.batches = 0

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        self.batches += 1
        raise DeviceGroupLost("tensor-parallel group of echo is down: a helper rank exited")

    def close(self) -> None:
        return None


def job(job_id: str) -> JobParams:
    from mediamesh.common.generation import GenerationParams

    # A job the echo model can run (the worker refuses jobs past a model's limits).
    generation = GenerationParams(prompt="x", steps=2, width=16, height=16)
    return JobParams(job_id, generation, resume_checkpoint="ckpt")


async def collect(runtime: WorkerRuntime, batch_id: str, jobs: list[JobParams]) -> list:
    return [event async for event in runtime.run_batch(batch_id, "echo", jobs)]


async def test_a_lost_device_group_faults_the_worker_instead_of_failing_jobs() -> None:
    host = LostGroupHost()
    runtime = WorkerRuntime("w", "on-demand", {"echo": host})
    try:
        with pytest.raises(DeviceGroupLost) as raised:
            await collect(runtime, "b1", [job("a")])
        assert isinstance(raised.value, Unavailable)  # RunBatch answers UNAVAILABLE
        assert runtime.fault is not None and "helper rank" in runtime.fault
        assert runtime.faulted.is_set() and runtime.draining
        assert runtime.drain_started.is_set() and runtime.drained.is_set()

        # A batch sent before the scheduler heard of it goes straight back, checkpoint kept.
        events = await collect(runtime, "b2", [job("b")])
        assert events == [JobPreempted("b", "ckpt", 0, wrote_checkpoint=False)]
        assert not any(isinstance(e, JobFailed) for e in events)
        assert host.batches == 1
        assert list(runtime.ended_batches) == ["b1", "b2"]
    finally:
        runtime.close()


def test_unavailable_is_the_status_of_a_lost_group() -> None:
    assert DeviceGroupLost("x").code is StatusCode.UNAVAILABLE
