"""A job rpc without a job id is INVALID_ARGUMENT naming `job_id` as required, on the
gateway and on the scheduler behind it, not NOT_FOUND for a job named ''."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import (
    gateway_pb2,
    gateway_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.service.conftest import start_mesh, stop_mesh


async def test_every_job_rpc_names_a_missing_job_id(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}") as to_gateway,
            grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}") as to_scheduler,
        ):
            gateway = gateway_pb2_grpc.GatewayStub(to_gateway)
            scheduler = scheduler_pb2_grpc.SchedulerStub(to_scheduler)
            unary = [
                gateway.GetJob(gateway_pb2.GetJobRequest()),
                gateway.Cancel(gateway_pb2.CancelRequest()),
                gateway.DeleteJob(gateway_pb2.DeleteJobRequest()),
                scheduler.GetJob(scheduler_pb2.ScopedJobRequest(tenant="default")),
            ]
            streams = [
                gateway.Watch(gateway_pb2.WatchRequest()),
                gateway.Download(gateway_pb2.DownloadRequest()),
            ]
            for call in unary:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call
                assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert caught.value.details() == "job_id: required"
            for stream in streams:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stream.read()
                assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert caught.value.details() == "job_id: required"
    finally:
        await stop_mesh(mesh)
