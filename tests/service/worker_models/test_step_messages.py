"""A worker sends a batch's step as one RunBatch message naming every job, and the scheduler's
link reads back one progress event per job: the same events the worker made in process."""

from __future__ import annotations

import grpc
import pytest

from mediamesh.common.api import worker_wire
from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFinished, JobParams, StepDone
from mediamesh.worker.api.servicer import WorkerServicer
from mediamesh.worker.hosting import load_host
from mediamesh.worker.runtime import WorkerRuntime

JOBS = 8
STEPS = 3


@pytest.fixture
def runtime(tmp_path):
    echo = load_registry().get("echo")
    host = load_host(echo, models_dir=tmp_path, device="cpu", checkpoint_dir=tmp_path)
    runtime = WorkerRuntime("w", "on-demand", {"echo": host})
    yield runtime
    runtime.close()


def batch() -> list[JobParams]:
    generation = GenerationParams("a fox", steps=STEPS, width=16, height=16)
    return [JobParams(f"job-{i}", generation) for i in range(JOBS)]


def shape(events: list) -> list[tuple[str, str, int]]:
    """What must match between two runs (step times differ)."""
    return [(type(e).__name__, e.job_id, getattr(e, "step", 0)) for e in events]


async def test_a_step_of_a_batch_is_one_message_naming_every_job(runtime) -> None:
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServicer_to_server(WorkerServicer(runtime, lambda *_: None), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            request = worker_pb2.RunBatchRequest(
                batch_id="b1", model="echo", jobs=[worker_wire.job_spec(j, 0) for j in batch()]
            )
            messages = [m async for m in worker_pb2_grpc.WorkerStub(channel).RunBatch(request)]
    finally:
        await server.stop(None)

    progress = [m for m in messages if m.WhichOneof("event") == "progress"]
    ids = [f"job-{i}" for i in range(JOBS)]
    # One message per step whatever the loop's timing: the host emits a step together.
    assert len(progress) == STEPS, [(m.job_id, list(m.more_job_ids)) for m in progress]
    per_step = {}
    for m in progress:
        per_step.setdefault(m.progress.step, []).extend([m.job_id, *m.more_job_ids])
    assert per_step == {step: ids for step in range(1, STEPS + 1)}

    received = [e for m in messages for e in worker_wire.worker_events(m)]
    in_process = [e async for e in runtime.run_batch("b2", "echo", batch())]
    assert shape(received) == shape(in_process)
    assert sum(isinstance(e, StepDone) for e in received) == JOBS * STEPS
    assert sum(isinstance(e, JobFinished) for e in received) == JOBS
