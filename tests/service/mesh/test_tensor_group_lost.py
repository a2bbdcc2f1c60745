"""A tensor-parallel worker whose helper rank died leaves instead of failing every job.

Before, it answered each batch with FAILED at once and stayed registered; failing instantly
kept its load low, so routing kept choosing it. Now it reports NOT_SERVING, hands the jobs
back, deregisters and asks to exit with a failing status, so its supervisor restarts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mediamesh.common.api.health import serving_status
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.registry import Registry, load_registry
from mediamesh.common.settings import WorkerSettings
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.worker.main import start_worker
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh

TENSOR_MODEL = "flux-tiny-tensor"


def registry_with_tensor_model() -> Registry:
    registry = load_registry()
    flux = registry.get("flux-tiny")
    assert flux is not None
    parallelism = flux.parallelism.model_copy(update={"mode": "tensor", "size": 2})
    tensor = flux.model_copy(
        # Adapters need the data mode: the tensor copy leaves flux-tiny's out.
        update={"name": TENSOR_MODEL, "parallelism": parallelism, "adapters": ()}
    )
    return Registry(models=[*registry.models, tensor])


async def until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def start_tensor_worker(mesh: InProcessMesh, registry: Registry, worker_id: str, tmp_path):
    settings = WorkerSettings(
        worker_id=worker_id,
        port=0,
        metrics_port=None,
        scheduler_address=f"127.0.0.1:{mesh.scheduler.port}",
        models=[TENSOR_MODEL],
        checkpoint_dir=tmp_path / "artifacts" / "checkpoints",
        drain_grace_s=5,
    )
    worker = await start_worker(mesh.config, registry, settings)
    mesh.workers.append(worker)
    await until(lambda: worker_id in mesh.core.units)
    return worker


async def test_a_worker_whose_helper_rank_died_hands_its_job_back_and_leaves(
    tmp_path, models_dir
) -> None:
    registry = registry_with_tensor_model()
    mesh = await start_mesh(tmp_path, models_dir, [], registry=registry)
    try:
        broken = await start_tensor_worker(mesh, registry, "tp0", tmp_path)
        (helper,) = broken.runtime.hosts[TENSOR_MODEL]._helpers
        helper.kill()
        await asyncio.to_thread(helper.join, 10)

        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model=TENSOR_MODEL, prompt="fox", steps=2, seed=5)
        job_id = (await stub.Submit(request, timeout=10)).job_id

        job = mesh.core.jobs[job_id]
        await until(lambda: broken.exit_requested.is_set() or job.state.terminal)
        assert not job.state.terminal, (job.state, job.error_message)
        # What its supervisor (`mediamesh worker` under `up` or Kubernetes) acts on.
        assert broken.exit_requested.is_set()
        address = f"127.0.0.1:{broken.port}"
        assert await asyncio.to_thread(serving_status, address) == "NOT_SERVING"
        await broken.drain_and_stop(5)
        mesh.workers.remove(broken)
        assert broken.exit_code != 0
        assert "tp0" not in mesh.core.units

        assert job.state is JobState.QUEUED, (job.state, job.error_message)
        # Sent to the broken worker and handed back, or never sent when the worker's watch on
        # its helpers saw the loss first: either way no attempt failed.
        assert job.attempts <= 1

        # The restarted worker (here: a fresh one in this process) runs it.
        await start_tensor_worker(mesh, registry, "tp1", tmp_path)
        await until(lambda: job.state.terminal)
        assert job.state is JobState.SUCCEEDED, (job.state, job.error_message)
        assert job.worker_id == "tp1"
    finally:
        await stop_mesh(mesh)
