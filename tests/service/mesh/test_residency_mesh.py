"""Model residency through the in-process mesh: two workers host flux-tiny and echo but keep
one model loaded each; the scheduler learns which is loaded where and sends each job to the
worker that has its model resident, so a model is cold-started once, not on every switch."""

from __future__ import annotations

import asyncio

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.test_warmup import echo_info, registry_with_warmup


async def run_job(mesh: InProcessMesh, model: str, seed: int) -> str:
    """Runs one job to success; returns the worker that ran it."""
    stub = mesh.gateway_stub()
    handle = await stub.Submit(
        common_pb2.GenerateRequest(model=model, prompt="a fox", steps=2, seed=seed)
    )
    async for _ in stub.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id)):
        pass
    info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=handle.job_id))
    assert info.state == common_pb2.SUCCEEDED, info
    return info.worker_id


async def reported_cold(mesh: InProcessMesh, worker_id: str, cold: set[str]) -> None:
    """Waits for the worker's heartbeat to tell the scheduler which models are cold (up to
    30 s: both workers load flux-tiny at start, which a loaded CI machine stretches)."""
    for _ in range(600):
        if mesh.core.units[worker_id].cold == cold:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{worker_id} reports {mesh.core.units[worker_id].cold}, not {cold}")


async def test_jobs_go_where_their_model_is_resident(tmp_path, models_dir) -> None:
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["flux-tiny", "echo"], ["flux-tiny", "echo"]],
        # A load is dearer than any queue here: a cold start only when no worker has it.
        scheduler={"model_load_prior_s": 60.0},
        worker={"max_resident_models": 1},
        # echo lists warm-up shapes, which its cold load runs inside the batch that loads it.
        registry=registry_with_warmup(),
    )
    try:
        # flux-tiny comes first in the registry, so both workers load it at start.
        for worker_id in ("w0", "w1"):
            await reported_cold(mesh, worker_id, {"echo"})
        info = await echo_info(mesh)
        assert (info.ready, info.warmup) == (True, "cold")
        echo_worker = await run_job(mesh, "echo", 1)
        flux_worker = "w1" if echo_worker == "w0" else "w0"
        await reported_cold(mesh, echo_worker, {"flux-tiny"})
        assert (await echo_info(mesh)).warmup == "warm"
        # Without residency routing the worker with fewer batches would take each next job.
        for seed in (2, 3):
            assert await run_job(mesh, "echo", seed) == echo_worker
        for seed in (4, 5):
            assert await run_job(mesh, "flux-tiny", seed) == flux_worker
        loads = {w.runtime.worker_id: dict(w.runtime.residency.loads) for w in mesh.workers}
        assert loads[echo_worker] == {"flux-tiny": 1, "echo": 1}
        assert loads[flux_worker] == {"flux-tiny": 1}
        assert mesh.core.residency.cold_starts == 1
    finally:
        await stop_mesh(mesh)
