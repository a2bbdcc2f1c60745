"""A worker hosting more models than it keeps loaded: with max_resident_models=1, batches of
two models alternating each load their model (evicting the other) in the device thread, and
give the same results as hosts that stay loaded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from prometheus_client import REGISTRY
from wm_helpers import job_for, of, run

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings
from mediamesh.common.work import JobFinished, WorkerEvent
from mediamesh.worker.main import hosted_specs, load_hosts
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.residency import ResidentHost
from mediamesh.worker.runtime import WorkerRuntime

MODELS = ["flux-tiny", "pixart-tiny"]


def _loads(model: str) -> float:
    return REGISTRY.get_sample_value("mediamesh_model_loads_total", {"model": model}) or 0.0


async def test_one_resident_model_serves_two_alternating_models(
    models_dir: Path, tmp_path: Path, host_for: Callable[[str], ModelHost]
) -> None:
    config = MeshConfig(models_dir=models_dir, workers=[])
    settings = WorkerSettings(
        models=MODELS, max_resident_models=1, checkpoint_dir=tmp_path, metrics_port=None
    )
    specs = hosted_specs(load_registry(), settings)
    counted_before = {m: _loads(m) for m in MODELS}
    hosts, residency = await asyncio.to_thread(load_hosts, config, settings, specs)
    assert all(isinstance(h, ResidentHost) for h in hosts.values())
    # At start only the first model fits; the other is hosted cold.
    assert dict(residency.loads) == {"flux-tiny": 1}
    runtime = WorkerRuntime("w0", "on-demand", hosts, residency)
    report = runtime.residency_report()
    assert report["flux-tiny"][0] and report["flux-tiny"][1] > 0
    assert report["pixart-tiny"] == (False, 0.0)
    try:
        order = ["pixart-tiny", "flux-tiny", "pixart-tiny", "flux-tiny"]
        for index, model in enumerate(order):
            spec = hosts[model].spec
            job = job_for(spec, f"job-{index}", seed=index, steps=2)
            events: list[WorkerEvent] = []
            async for event in runtime.run_batch(f"b{index}", model, [job]):
                events.append(event)
            (result,) = of(events, job.job_id, JobFinished)
            (expected,) = of(run(host_for(model), [job]), job.job_id, JobFinished)
            assert result.data == expected.data, model
            report = runtime.residency_report()
            assert [m for m, (resident, _) in report.items() if resident] == [model]
        # Every switch was a load: flux at start and twice more, pixart twice.
        assert dict(residency.loads) == {"flux-tiny": 3, "pixart-tiny": 2}
        assert {m: _loads(m) - counted_before[m] for m in MODELS} == {
            "flux-tiny": 3,
            "pixart-tiny": 2,
        }
        assert all(seconds > 0 for _, seconds in runtime.residency_report().values())
    finally:
        await asyncio.to_thread(runtime.close)
    assert not any(resident for resident, _ in runtime.residency_report().values())
