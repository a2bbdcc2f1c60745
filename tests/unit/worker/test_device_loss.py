"""The worker's background readers of its devices: a driver that stops answering faults the
worker; any other failed reading is logged and the reader goes on (it used to die silently
at its first failure, freezing the memory gauges)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import torch

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.work import JobParams
from mediamesh.worker import main
from mediamesh.worker.core.batch import BatchControl, DeviceGroupLost, Emit
from mediamesh.worker.models import device_loss
from mediamesh.worker.runtime import WorkerRuntime

FELL_OFF = "CUDA error: unspecified launch failure (GPU has fallen off the bus)"


class BrokenHost:
    """An echo entry with a warm-up shape whose device broke: every batch raises."""

    def __init__(self) -> None:
        echo = load_registry().get("echo")
        assert echo is not None
        self.spec = ModelSpec.model_validate({**echo.model_dump(), "warmup": [{"steps": 1}]})
        self.device_ids = ["cuda:0"]

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        raise DeviceGroupLost("device cuda:0 of model 'echo' stopped working")

    def close(self) -> None:
        return None


def runtime() -> WorkerRuntime:
    return WorkerRuntime("w", "on-demand", {"echo": BrokenHost()})


async def test_a_device_whose_memory_cannot_be_read_any_more_faults_the_worker(
    monkeypatch,
) -> None:
    def dead(device: str) -> tuple[int, int]:
        raise torch.AcceleratorError(FELL_OFF)

    monkeypatch.setattr(main, "device_memory", dead)
    monkeypatch.setattr(device_loss, "_answers", lambda device: False)
    worker = runtime()
    try:
        await asyncio.wait_for(main._report_memory(["cuda:0"], worker), 5)
        assert worker.fault is not None and "fallen off the bus" in worker.fault
        assert worker.faulted.is_set() and worker.draining
    finally:
        worker.close()


async def test_other_failed_readings_are_logged_once_and_the_reader_goes_on(
    monkeypatch, caplog
) -> None:
    readings: list[str] = []
    # main.asyncio is the asyncio module: the real sleep is kept before it is patched.
    real_sleep = asyncio.sleep

    def flaky(device: str) -> tuple[int, int]:
        readings.append(device)
        if device == "cuda:1":
            raise OSError("nvml busy")
        return 100, 40

    async def fast_sleep(_seconds: float) -> None:
        if len(readings) >= 6:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(main, "device_memory", flaky)
    monkeypatch.setattr(main.asyncio, "sleep", fast_sleep)
    worker = runtime()
    caplog.set_level(logging.WARNING, "mediamesh.worker")
    try:
        with pytest.raises(asyncio.CancelledError):
            await main._report_memory(["cuda:0", "cuda:1"], worker)
        assert readings == ["cuda:0", "cuda:1"] * 3  # three rounds: it kept reading
        warnings = [r for r in caplog.records if "cannot read the memory of cuda:1" in r.message]
        assert len(warnings) == 1 and worker.fault is None
    finally:
        worker.close()


async def test_a_device_lost_during_the_start_up_warm_up_faults_the_worker() -> None:
    worker = runtime()
    registered: list[Any] = []
    try:
        await main._warm_up(worker, server=None, register_warm=lambda: registered.append(1))  # type: ignore[arg-type]
        assert worker.fault is not None and "stopped working" in worker.fault
        assert worker.faulted.is_set() and registered == []
    finally:
        worker.close()


def test_out_of_memory_and_plain_errors_are_no_device_loss() -> None:
    assert not device_loss.device_lost(torch.OutOfMemoryError("CUDA out of memory"), ["cpu"])
    assert not device_loss.device_lost(RuntimeError("shape mismatch"), ["cpu"])
    oom = torch.AcceleratorError("CUDA error: out of memory")
    assert not device_loss.device_lost(oom, ["cuda:0"])
    assert device_loss.device_lost(torch.AcceleratorError(FELL_OFF), ["cpu"])
