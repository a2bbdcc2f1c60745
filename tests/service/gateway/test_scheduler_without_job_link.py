"""A gateway in front of a scheduler older than JobLink (a rolling upgrade: gateways first)
sends each job on a call of its own instead of failing every Generate with the scheduler's
"Method not found!", and says why once in its log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.api.servicer import SchedulerServicer
from tests.service.conftest import start_mesh, stop_mesh


async def _no_job_link(
    self: SchedulerServicer, requests: AsyncIterator[object], context: grpc.aio.ServicerContext
) -> AsyncIterator[object]:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    yield  # an async generator, as the real method is


async def _unknown_call(self: SchedulerServicer, request: object, context: object) -> object:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")  # type: ignore[attr-defined]


async def test_jobs_go_on_calls_of_their_own_when_the_scheduler_has_no_job_link(
    tmp_path: Path,
    models_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(SchedulerServicer, "JobLink", _no_job_link)
    monkeypatch.setattr(SchedulerServicer, "DeleteJob", _unknown_call)
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        stub = mesh.gateway_stub()
        with caplog.at_level(logging.WARNING, logger="mediamesh.gateway"):
            for prompt in ("first", "second"):
                request = common_pb2.GenerateRequest(model="echo", prompt=prompt)
                events = [e async for e in stub.Generate(request, timeout=30)]
                assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
        link = mesh.gateway.upstream.link
        assert link is not None and link.unsupported()
        assert any("older than this gateway" in r.getMessage() for r in caplog.records)
        # A call it has no fallback for says so rather than grpc's bare "Method not found!".
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=events[-1].job_id))
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "older than this gateway; upgrade the scheduler" in (refused.value.details() or "")
    finally:
        await stop_mesh(mesh)
