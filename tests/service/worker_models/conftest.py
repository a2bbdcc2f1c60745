"""Tiny models built once per session into a temp dir; nothing is downloaded."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# pytest puts this directory, not the repository root, on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.build import build_models
from mediamesh.worker.models.host import ModelHost


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("models")
    build_models(
        target,
        [
            "flux-tiny",
            "wan-tiny",
            "stable-audio-tiny",
            "sdxl-tiny",
            "sd3-tiny",
            "pixart-tiny",
            "cogvideox-tiny",
            "audioldm2-tiny",
        ],
    )
    return target


@pytest.fixture(scope="session")
def registry_spec() -> Callable[[str], ModelSpec]:
    registry = load_registry()

    def get(name: str) -> ModelSpec:
        spec = registry.get(name)
        assert spec is not None
        return spec

    return get


@pytest.fixture(scope="session")
def host_for(
    models_dir: Path,
    registry_spec: Callable[[str], ModelSpec],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str], ModelHost]]:
    hosts: dict[str, ModelHost] = {}
    checkpoints = tmp_path_factory.mktemp("checkpoints")

    def get(name: str) -> ModelHost:
        if name not in hosts:
            hosts[name] = load_host(
                registry_spec(name), models_dir=models_dir, device="cpu", checkpoint_dir=checkpoints
            )
        return hosts[name]

    yield get
    for host in hosts.values():
        host.close()
