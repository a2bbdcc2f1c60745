"""A job that ends while Watch is sending its snapshot still delivers its final event."""

from __future__ import annotations

from mediamesh.common.generated.v1 import common_pb2
from tests.service.conftest import start_mesh, stop_mesh


async def test_final_event_after_the_snapshot_is_not_lost(tmp_path, models_dir):
    mesh = await start_mesh(tmp_path, models_dir, [])  # no worker: the job waits
    try:
        handle = await mesh.gateway_stub().Submit(
            common_pb2.GenerateRequest(model="echo", prompt="x")
        )
        runtime = mesh.scheduler.runtime
        watch = runtime.watch(handle.job_id, "default")
        snapshot = await watch.__anext__()
        assert snapshot.kind == "queued"
        await runtime.cancel(handle.job_id, "default")  # ends while the snapshot is "in flight"
        final = await watch.__anext__()
        assert final.final and final.code == "CANCELLED"
        await watch.aclose()
    finally:
        await stop_mesh(mesh)
