"""A gateway that has lost its scheduler (no answer for scheduler_lost_after_s) refuses new
jobs at once with UNAVAILABLE, sending nothing: a scheduler stopped mid-flight (SIGSTOP, a
stalled VM) keeps its connections, so a submit sent to it waited out its whole deadline and
then left the caller unable to tell whether a job was made."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.gateway.api.upstream import UNREACHABLE_MESSAGE
from tests.service.conftest import start_mesh, stop_mesh


async def test_new_jobs_are_refused_at_once_while_the_scheduler_is_lost(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="x")
        await stub.Submit(request, timeout=10)  # served while the scheduler answers
        known = len(mesh.core.jobs)
        # The watch's verdict after scheduler_lost_after_s of silence, held there.
        mesh.gateway._watch_task.cancel()
        mesh.gateway.watch.serving = False

        async def submit() -> None:
            await stub.Submit(request, timeout=10)

        async def generate() -> None:
            async for _ in stub.Generate(request, timeout=10):
                pass

        for call in (submit, generate):
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call()
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.value.details() == UNREACHABLE_MESSAGE
            assert time.monotonic() - started < 2
        assert len(mesh.core.jobs) == known  # nothing reached the scheduler
    finally:
        await stop_mesh(mesh)
