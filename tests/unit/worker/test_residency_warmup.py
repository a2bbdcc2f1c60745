"""Warm-up under residency limits: the start-up warm-up runs only on the models loaded at start
(it does not load cold ones, which would evict the others), and a model warms again each
time a batch (re)loads it, before that batch's jobs. Two Echo entries stand in for models;
a call hook records every call each one makes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings
from mediamesh.common.work import JobFinished, JobParams
from mediamesh.worker.core import call_hooks
from mediamesh.worker.main import load_hosts
from mediamesh.worker.runtime import WorkerRuntime
from mediamesh.worker.warming import WARMUP_JOB_PREFIX, run_warmups

MODELS = ("echo-a", "echo-b")
WARMUP = [{"width": 32, "height": 16, "steps": 2, "batch": 2}]


def echo_with_warmup(name: str) -> ModelSpec:
    echo = load_registry().get("echo")
    assert echo is not None
    return ModelSpec.model_validate({**echo.model_dump(), "name": name, "warmup": WARMUP})


@pytest.fixture
def calls() -> Iterator[list[tuple[str, str]]]:
    """(model, "warm-up" or "user") per model call, in call order."""
    seen: list[tuple[str, str]] = []
    for model in MODELS:

        def record(jobs: list[JobParams], model: str = model) -> None:
            kind = "warm-up" if jobs[0].job_id.startswith(WARMUP_JOB_PREFIX) else "user"
            seen.append((model, kind))

        call_hooks.install(model, record)
    yield seen
    for model in MODELS:
        call_hooks.remove(model)


async def test_a_model_warms_whenever_it_is_loaded(
    tmp_path: Path, calls: list[tuple[str, str]]
) -> None:
    config = MeshConfig(models_dir=tmp_path, workers=[])
    settings = WorkerSettings(
        models=list(MODELS), max_resident_models=1, checkpoint_dir=tmp_path, metrics_port=None
    )
    specs = [echo_with_warmup(name) for name in MODELS]
    hosts, residency = await asyncio.to_thread(load_hosts, config, settings, specs)
    # The preload loads the first model but leaves its warm-up to the start-up warm-up,
    # which runs while the worker is registered as warming.
    assert dict(residency.loads) == {"echo-a": 1} and calls == []

    took = await asyncio.to_thread(run_warmups, hosts)
    assert set(took) == {"echo-a"}
    assert calls == [("echo-a", "warm-up")]
    # The cold model was neither loaded nor warmed, so nothing was evicted for it.
    assert dict(residency.loads) == {"echo-a": 1}

    runtime = WorkerRuntime("w0", "on-demand", hosts, residency)
    try:
        for index, model in enumerate(["echo-b", "echo-a", "echo-a"]):
            calls.clear()
            generation = GenerationParams("x", steps=1, seed=index, width=16, height=16)
            job = JobParams(f"job-{index}", generation)
            events = [e async for e in runtime.run_batch(f"b{index}", model, [job])]
            assert [e.job_id for e in events if isinstance(e, JobFinished)] == [job.job_id], events
            if index < 2:
                # A load (echo-b's first, echo-a's after its eviction) warms before the job.
                assert calls == [(model, "warm-up"), (model, "user")]
            else:
                # Still loaded and warm: the batch runs at once.
                assert calls == [(model, "user")]
        assert dict(residency.loads) == {"echo-a": 2, "echo-b": 1}
    finally:
        await asyncio.to_thread(runtime.close)
