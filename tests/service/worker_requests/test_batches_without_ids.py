"""A batch without an id, a model or jobs is refused by the worker, on RunBatch and on
BatchLink, naming the field; nothing of it is recorded as ended. An ended-batch id the
scheduler would refuse is never reported, so it cannot end the worker's session at drain
and leave its real batches unconfirmed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from mediamesh.common.api.status import to_number
from mediamesh.common.errors import StatusCode
from mediamesh.common.generated.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh

JOB = worker_pb2.JobSpec(job_id="j1", prompt="x")
# Each request lacks one field: (request, the field its refusal names).
INCOMPLETE = [
    (worker_pb2.RunBatchRequest(model="echo", jobs=[JOB]), "batch_id"),
    (worker_pb2.RunBatchRequest(batch_id="b1", jobs=[JOB]), "model"),
    (worker_pb2.RunBatchRequest(batch_id="b1", model="echo"), "jobs"),
    (worker_pb2.RunBatchRequest(), "batch_id"),
]


@pytest.fixture
async def mesh(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    yield mesh
    await stop_mesh(mesh)


def worker_stub(mesh: InProcessMesh) -> worker_pb2_grpc.WorkerStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.workers[0].port}")
    mesh.channels.append(channel)
    return worker_pb2_grpc.WorkerStub(channel)


async def test_run_batch_without_an_id_a_model_or_jobs_is_refused(mesh: InProcessMesh):
    stub = worker_stub(mesh)
    for request, field in INCOMPLETE:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.RunBatch(request, timeout=5):
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith(f"{field}: required")
    assert list(mesh.workers[0].runtime.ended_batches) == []


async def test_batch_link_run_without_an_id_a_model_or_jobs_is_refused(mesh: InProcessMesh):
    stub = worker_stub(mesh)
    runs = [worker_pb2.BatchLinkRequest(run=request) for request, _ in INCOMPLETE]
    link = stub.BatchLink(timeout=5)
    await link.write(worker_pb2.BatchLinkRequests(requests=runs))
    ends = []
    while len(ends) < len(runs):
        events = await link.read()
        ends.extend(e.end for e in events.events if e.HasField("end"))
    await link.done_writing()
    link.cancel()
    assert {end.code for end in ends} == {to_number(StatusCode.INVALID_ARGUMENT)}
    assert [end.message.split(":")[0] for end in ends] == [
        f"run.{field}" for _, field in INCOMPLETE
    ]
    assert list(mesh.workers[0].runtime.ended_batches) == []


async def test_an_ended_batch_id_the_scheduler_would_refuse_is_not_reported(
    mesh: InProcessMesh,
):
    gateway = mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="echo", prompt="x")
    async for _ in gateway.Generate(request, timeout=10):
        pass
    worker = mesh.workers[0]
    # The batch is recorded as ended once its stream has closed, moments after the result.
    for _ in range(100):
        if worker.runtime.ended_batches:
            break
        await asyncio.sleep(0.02)
    real = list(worker.runtime.ended_batches)
    assert real
    # Whatever recorded it: one bad id refused the whole message and ended the session.
    assert await worker.session.settle(["", *real], timeout_s=3.0)
    await asyncio.sleep(0.2)
    assert worker.session.registered.is_set()
