"""Parallel modes on GPUs, checked on the CPU: what is refused at load (naming the field)
before a group forms or weights load, and what the group is set up with."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.parallel import context_host, pipeline_mode, rank, tensor_host
from mediamesh.worker.parallel.context_parallel import check_context_support


def flux(gpu: dict[str, Any] | None = None, **parallelism: Any) -> ModelSpec:
    spec = load_registry().get("flux-tiny")
    assert spec is not None
    options = spec.parallelism.model_copy(update=parallelism)
    return spec.model_copy(
        update={
            "parallelism": options,
            "adapters": (),
            "gpu": spec.gpu.model_copy(update=gpu or {}),
        }
    )


def with_plan() -> Any:
    """What check_context_support reads of a pipeline whose transformer can be split."""
    config = SimpleNamespace(num_attention_heads=4)
    return SimpleNamespace(transformer=SimpleNamespace(_cp_plan={"": {}}, config=config))


# Ring attention needs a backend that returns log-sum-exp -------------------------------------


@pytest.mark.parametrize("backend", [None, "native", "_native_math", "flex"])
def test_ring_attention_on_cuda_needs_a_backend_that_returns_the_log_sum_exp(backend) -> None:
    spec = flux({"attention_backend": backend}, mode="context", ring=2)
    with pytest.raises(ModelLoadError) as refused:
        check_context_support(spec, with_plan(), "cuda:0")
    message = str(refused.value)
    assert "'flux-tiny' field gpu.attention_backend: parallelism.ring 2" in message
    assert f"{backend or 'native'} does not" in message and "flash" in message


@pytest.mark.parametrize("backend", ["flash", "_native_cudnn", "_native_flash", "sage"])
def test_ring_attention_takes_the_backends_that_return_it(backend) -> None:
    check_context_support(
        flux({"attention_backend": backend}, mode="context", ring=2), with_plan(), "cuda:0"
    )
    # Ulysses alone never asks for it: the default backend serves.
    check_context_support(flux(mode="context", ulysses=2), with_plan(), "cuda:0")


# One GPU per rank ---------------------------------------------------------------------------


@pytest.fixture
def no_group(monkeypatch) -> list[list[str]]:
    """start_rank_group and rank 0's load replaced: records the devices a group got."""
    started: list[list[str]] = []

    def start(spec: ModelSpec, *, devices: list[str], **_: Any) -> str:
        started.append(devices)
        return "group"

    def no_load(*_: Any, **__: Any) -> Any:
        return with_plan()

    monkeypatch.setattr(tensor_host, "start_rank_group", start)
    monkeypatch.setattr(context_host, "start_rank_group", start)
    monkeypatch.setattr(context_host, "load_pipeline", no_load)
    return started


def load_tensor(spec: ModelSpec, device: str) -> Any:
    return tensor_host.load_tensor_parallel_host(
        spec, models_dir=Path("."), device=device, checkpoint_dir=Path(".")
    )


def load_context(spec: ModelSpec, device: str) -> Any:
    return context_host.load_context_parallel_host(
        spec, models_dir=Path("."), device=device, checkpoint_dir=Path(".")
    )


@pytest.mark.parametrize("load", [load_tensor, load_context])
def test_ranks_that_would_share_a_gpu_are_refused_naming_the_devices_field(load, no_group) -> None:
    degrees = {"size": 2} if load is load_tensor else {"ulysses": 2}
    mode = "tensor" if load is load_tensor else "context"
    with pytest.raises(ModelLoadError) as refused:
        load(flux(mode=mode, **degrees), "cuda:1")
    message = str(refused.value)
    assert "'flux-tiny' field parallelism.devices: unset" in message
    assert "2 ranks would share cuda:1" in message and "one GPU per rank" in message
    with pytest.raises(ModelLoadError, match=r"parallelism.devices: .*share cuda:0"):
        load(flux(mode=mode, devices=["cuda", "cuda:0"], **degrees), "cpu")
    with pytest.raises(ModelLoadError, match=r"parallelism.devices: .*mixes CUDA"):
        load(flux(mode=mode, devices=["cuda:0", "cpu"], **degrees), "cpu")
    assert no_group == []
    # Distinct GPUs form a group; so do ranks sharing the CPU over gloo.
    load(flux(mode=mode, devices=["cuda:0", "cuda:1"], **degrees), "cpu")
    load(flux(mode=mode, **degrees), "cpu")
    assert no_group == [["cuda:0", "cuda:1"], ["cpu", "cpu"]]


# Pipeline mode stays on its listed GPUs -------------------------------------------------------

GIB = 1 << 30


@pytest.fixture
def captured(monkeypatch) -> list[dict[str, Any]]:
    """The keyword arguments of each load pipeline mode makes; nothing is loaded."""
    calls: list[dict[str, Any]] = []
    pipeline = SimpleNamespace(components={})

    def load_pipeline(spec: ModelSpec, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return pipeline

    def split(spec: ModelSpec, models_dir: Path, max_memory: Any, folder: Any) -> Any:
        calls.append({"max_memory": max_memory})
        return "transformer", None

    free = {"cuda:0": 70 * GIB, "cuda:1": 60 * GIB, "cuda:2": 50 * GIB, "cpu": 10 * GIB}
    monkeypatch.setattr(pipeline_mode, "load_pipeline", load_pipeline)
    monkeypatch.setattr(pipeline_mode, "_load_split_denoiser", split)
    monkeypatch.setattr(pipeline_mode, "device_memory", lambda device: (0, free[device]))
    monkeypatch.setattr(pipeline_mode, "host_class", lambda spec: lambda *a, **k: "host")
    return calls


def load_pipeline_mode(spec: ModelSpec) -> Any:
    return pipeline_mode.load_pipeline_parallel_host(
        spec, models_dir=Path("."), checkpoint_dir=Path(".")
    )


@pytest.mark.parametrize("device_map", ["balanced", "auto"])
def test_pipeline_mode_places_only_on_the_listed_gpus(captured, device_map) -> None:
    load_pipeline_mode(flux(mode="pipeline", device_map=device_map, devices=["cuda:1", "cuda:2"]))
    # Their free memory now, and the host's for what spills; never cuda:0.
    assert captured[0]["max_memory"] == {1: 60 * GIB, 2: 50 * GIB, "cpu": 10 * GIB}


def test_pipeline_mode_without_devices_or_caps_is_left_to_accelerate(captured) -> None:
    load_pipeline_mode(flux(mode="pipeline"))
    assert captured[0]["max_memory"] is None
    load_pipeline_mode(flux(mode="pipeline", max_memory={"cuda:3": "8GiB"}))
    assert captured[1]["max_memory"] == {3: "8GiB"}


def test_pipeline_mode_refuses_caps_on_gpus_it_does_not_list(captured) -> None:
    spec = flux(
        mode="pipeline",
        devices=["cuda:1", "cuda:2"],
        max_memory={"cuda:1": "8GiB", "cuda:0": "8GiB", "cpu": "4GiB", "disk": "1GiB"},
    )
    with pytest.raises(ModelLoadError) as refused:
        load_pipeline_mode(spec)
    assert str(refused.value).startswith(
        "model 'flux-tiny' field parallelism.max_memory: cuda:0 not in parallelism.devices "
        "(cuda:1, cuda:2)"
    )
    assert captured == []


# NCCL's error handling ------------------------------------------------------------------------


@pytest.fixture
def joined(monkeypatch) -> list[tuple[str, str | None]]:
    """(backend, TORCH_NCCL_ASYNC_ERROR_HANDLING when the group was made) per join."""
    calls: list[tuple[str, str | None]] = []

    def init_process_group(backend: str, **_: Any) -> None:
        calls.append((backend, os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")))

    monkeypatch.setattr(rank.dist, "init_process_group", init_process_group)
    for name in rank.NCCL_ERROR_HANDLING:
        monkeypatch.delenv(name, raising=False)
    return calls


def join(backend: str) -> None:
    rank.join_group(
        backend, init_method="tcp://x", rank=0, world_size=2, timeout=timedelta(seconds=1)
    )


def test_nccl_groups_raise_errors_instead_of_aborting_the_worker(joined, monkeypatch) -> None:
    join("gloo")
    assert joined == [("gloo", None)]
    join("nccl")
    # 2: abort the communicators and raise; torch's default 3 kills the process (SIGABRT).
    assert joined[-1] == ("nccl", "2")


@pytest.mark.parametrize("name", ["TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"])
def test_an_operators_nccl_error_handling_is_kept(joined, monkeypatch, name) -> None:
    monkeypatch.setenv(name, "1")
    join("nccl")
    assert os.environ[name] == "1"
    assert joined[-1] == ("nccl", "1" if name.startswith("TORCH") else None)
