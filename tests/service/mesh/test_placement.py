"""BATCH work prefers spot and falls back to on-demand when no spot capacity shows up."""

from __future__ import annotations

import time

from mediamesh.common.generated.v1 import common_pb2
from tests.service.conftest import start_mesh, stop_mesh


async def test_batch_job_without_spot_capacity_falls_back_after_the_wait(tmp_path, models_dir):
    placement = {
        "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 0.6}
    }
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], scheduler={"placement": placement})
    try:
        stub = mesh.gateway_stub()
        started = time.monotonic()
        request = common_pb2.GenerateRequest(model="echo", prompt="x", priority=common_pb2.BATCH)
        events = [e async for e in stub.Generate(request)]
        waited = time.monotonic() - started
        assert events[-1].state == common_pb2.SUCCEEDED
        notices = [e.notice.kind for e in events if e.HasField("notice")]
        assert "spot_fallback" in notices
        assert waited >= 0.6
        assert mesh.core.spot_fallbacks["image"] == 1
        standard = [
            e async for e in stub.Generate(common_pb2.GenerateRequest(model="echo", prompt="y"))
        ]
        assert "spot_fallback" not in [e.notice.kind for e in standard if e.HasField("notice")]
    finally:
        await stop_mesh(mesh)
