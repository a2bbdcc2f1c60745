"""The worker's Drain refuses a grace period that is negative, NaN or infinite, as the CLI
does, naming `grace_s` and the range (0: the worker's configured `drain_grace_s`); the
worker goes on serving. A negative one used to be taken silently as the default."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from tests.service.conftest import start_mesh, stop_mesh


@pytest.mark.parametrize("grace_s", [-1.0, float("nan"), float("inf"), float("-inf")])
async def test_drain_refuses_a_grace_period_out_of_range(
    tmp_path: Path, models_dir: Path, grace_s: float
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.workers[0].port}")
        mesh.channels.append(channel)
        stub = worker_pb2_grpc.WorkerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Drain(worker_pb2.DrainRequest(grace_s=grace_s, exit=True), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("grace_s: ")
        assert "a finite number of seconds >= 0" in caught.value.details()
        assert not mesh.workers[0].runtime.draining
    finally:
        await stop_mesh(mesh)
