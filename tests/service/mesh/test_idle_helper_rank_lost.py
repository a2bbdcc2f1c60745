"""A tensor-parallel worker whose helper rank dies while no batch runs leaves at once,
rather than staying ready until the next batch it would fail."""

from __future__ import annotations

import asyncio

from mediamesh.common.api.health import serving_status
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_tensor_group_lost import (
    TENSOR_MODEL,
    registry_with_tensor_model,
    start_tensor_worker,
    until,
)


async def test_a_helper_rank_dying_between_batches_turns_the_worker_not_serving(
    tmp_path, models_dir
) -> None:
    registry = registry_with_tensor_model()
    mesh = await start_mesh(tmp_path, models_dir, [], registry=registry)
    try:
        worker = await start_tensor_worker(mesh, registry, "tp0", tmp_path)
        (helper,) = worker.runtime.hosts[TENSOR_MODEL]._helpers
        helper.kill()
        await until(lambda: worker.exit_requested.is_set(), timeout=5)
        assert "a helper rank exited" in (worker.runtime.fault or "")
        address = f"127.0.0.1:{worker.port}"
        assert await asyncio.to_thread(serving_status, address) == "NOT_SERVING"
        await worker.drain_and_stop(5)
        mesh.workers.remove(worker)
        assert worker.exit_code != 0
    finally:
        await stop_mesh(mesh)
