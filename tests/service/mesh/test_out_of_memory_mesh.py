"""Out of memory through the mesh: every job of a split batch succeeds exactly once, and the
scheduler sends no more batches of that model and shape above what fitted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.registry import ModelSpec, Registry, load_registry
from mediamesh.common.work import JobParams
from mediamesh.worker.core import call_hooks
from tests.service.conftest import start_mesh, stop_mesh

MODEL = "flux-tiny"
FITS = 2


def patient_registry() -> Registry:
    """flux-tiny waiting long enough for four concurrent submissions to share a batch."""
    registry = load_registry()
    spec = registry.get(MODEL)
    assert spec is not None
    batching = {"mode": "dynamic", "max_batch": 4, "max_wait_ms": 5000}
    patient = ModelSpec.model_validate({**spec.model_dump(), "batching": batching})
    return Registry(models=[patient if m.name == MODEL else m for m in registry.models])


async def run_jobs(mesh, seeds: range) -> list[list[common_pb2.GenerateEvent]]:
    """Submit a job per seed and collect each one's events. The batch forms only once the
    last job is queued, so every other job is watched before then and sees its notices."""
    stub = mesh.gateway_stub()
    *first, last = seeds

    def submit(seed: int):
        request = common_pb2.GenerateRequest(model=MODEL, prompt="p", steps=1, seed=seed)
        return stub.Submit(request)

    handles = await asyncio.gather(*(submit(s) for s in first))
    attached = [asyncio.Event() for _ in handles]
    watches = [
        asyncio.ensure_future(_collect(stub.Watch(gateway_pb2.WatchRequest(job_id=h.job_id)), a))
        for h, a in zip(handles, attached, strict=True)
    ]
    await asyncio.wait_for(asyncio.gather(*(a.wait() for a in attached)), 30)
    final = await submit(last)
    watches.append(
        asyncio.ensure_future(_collect(stub.Watch(gateway_pb2.WatchRequest(job_id=final.job_id))))
    )
    return list(await asyncio.gather(*watches))


async def _collect(stream, attached: asyncio.Event | None = None) -> list[common_pb2.GenerateEvent]:
    events = []
    async for event in stream:
        events.append(event)
        if attached is not None:
            attached.set()
    return events


async def test_split_batches_finish_once_and_the_scheduler_learns(
    tmp_path: Path, models_dir: Path
) -> None:
    sizes: list[int] = []

    def out_of_memory_above_fit(jobs: list[JobParams]) -> None:
        sizes.append(len(jobs))
        if len(jobs) > FITS:
            raise torch.OutOfMemoryError("CUDA out of memory (test hook)")

    call_hooks.install(MODEL, out_of_memory_above_fit)
    mesh = await start_mesh(tmp_path, models_dir, [[MODEL]], registry=patient_registry())
    try:
        first = await run_jobs(mesh, range(4))
        second = await run_jobs(mesh, range(10, 14))
        for events in first + second:
            results = [e for e in events if e.HasField("result")]
            assert len(results) == 1 and events[-1].state == common_pb2.SUCCEEDED, [
                (e.WhichOneof("event"), e.state) for e in events
            ]
        split = [
            e.notice
            for events in first
            for e in events
            if e.HasField("notice") and e.notice.kind == "oom_split"
        ]
        assert sizes[0] == 4 and split
        # After the split, no batch above the ceiling was sent again.
        assert max(sizes[1:]) <= FITS
        assert all(size <= FITS for size in sizes[-2:])
    finally:
        call_hooks.remove(MODEL)
        await stop_mesh(mesh)
