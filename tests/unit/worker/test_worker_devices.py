"""CUDA and MPS devices a worker cannot see refuse its start in one line naming the setting (on this
CPU build of torch there are none), before any model loads: they used to surface as a bare
AssertionError from torch.cuda deep inside the first model's load."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings
from mediamesh.worker import device_check
from mediamesh.worker.main import load_hosts


def entry(name: str, **parallelism: object) -> ModelSpec:
    spec = load_registry().get(name)
    assert spec is not None
    options = spec.parallelism.model_copy(update=parallelism)
    return spec.model_copy(update={"parallelism": options, "adapters": ()})


def start(tmp_path: Path, device: str, specs: list[ModelSpec]) -> None:
    config = MeshConfig(models_dir=tmp_path, workers=[])
    worker = WorkerSettings(worker_id="w0", device=device, checkpoint_dir=tmp_path)
    load_hosts(config, worker, specs)


def test_a_worker_device_this_torch_cannot_use_refuses_the_start(tmp_path: Path) -> None:
    with pytest.raises(StartupError) as refused:
        start(tmp_path, "cuda:0", [entry("echo")])
    message = str(refused.value)
    assert message.startswith("worker 'w0' field device: cuda:0: this torch build has no CUDA")
    assert "\n" not in message


def test_a_models_devices_are_checked_too(tmp_path: Path) -> None:
    spec = entry("flux-tiny", mode="pipeline", devices=["cpu", "cuda:1"])
    with pytest.raises(StartupError, match=r"'flux-tiny' field parallelism\.devices: cuda:1"):
        start(tmp_path, "cpu", [spec])


def test_an_index_past_the_visible_gpus_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(device_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device_check.torch.cuda, "device_count", lambda: 2)
    worker = WorkerSettings(worker_id="w0", device="cuda:1")
    device_check.refuse_unavailable_devices(worker, [])
    spec = entry("flux-tiny", mode="pipeline", max_memory={"cuda:2": "8GiB", "cpu": "1GiB"})
    with pytest.raises(StartupError) as refused:
        device_check.refuse_unavailable_devices(worker, [spec])
    assert str(refused.value).startswith(
        "model 'flux-tiny' field parallelism.max_memory: cuda:2: only 2 GPU(s) visible"
    )


def test_an_mps_device_on_a_host_without_one_refuses_the_start(tmp_path: Path, monkeypatch) -> None:
    # Data mode placed its pipeline on the worker's device unchecked: without MPS, torch
    # failed at the first load, after the worker had said it was starting.
    monkeypatch.setattr(device_check.torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(StartupError) as refused:
        start(tmp_path, "mps", [entry("flux-tiny")])
    assert str(refused.value).startswith(
        "worker 'w0' field device: mps: mps is not available on this host"
    )
    monkeypatch.setattr(device_check.torch.backends.mps, "is_available", lambda: True)
    device_check.refuse_unavailable_devices(WorkerSettings(worker_id="w0", device="mps"), [])
