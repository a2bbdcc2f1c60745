"""Context parallelism (a size-2 Ulysses group) through `mediamesh up`, against data mode."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from PIL import Image

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.registry import DEFAULT_REGISTRY

pytestmark = pytest.mark.e2e

# Ulysses attention computes every head over the whole sequence, as data mode does; only
# the all-to-all moves the numbers, so outputs differ by float rounding alone: at most a
# couple of levels on a pixel after decoding, and on average far under one.
MAX_LEVELS = 2
MEAN_LEVELS = 0.05


def registry_with_context(tmp_path: Path) -> Path:
    entries = yaml.safe_load(DEFAULT_REGISTRY.read_text())["models"]
    flux = next(e for e in entries if e["name"] == "flux-tiny")
    # Adapters need the data mode: the context copy leaves flux-tiny's out.
    context = copy.deepcopy(flux) | {"name": "flux-tiny-context", "adapters": []}
    context["parallelism"] = {"mode": "context", "ulysses": 2, "ring": 1}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [flux, context]}))
    return path


def generate(stub: gateway_pb2_grpc.GatewayStub, **fields: object) -> np.ndarray:
    events = list(stub.Generate(common_pb2.GenerateRequest(**fields), timeout=300))
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    progress = [e.progress.step for e in events if e.HasField("progress")]
    assert progress == list(range(1, int(fields["steps"]) + 1))  # type: ignore[call-overload]
    return np.asarray(Image.open(io.BytesIO(events[-1].result.data)), dtype=int)


def test_ulysses_group_matches_data_mode(launch, tmp_path: Path) -> None:
    mesh = launch(
        [{"models": ["flux-tiny"]}, {"models": ["flux-tiny-context"]}],
        registry_path=str(registry_with_context(tmp_path)),
    )
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        listed = {m.name: m for m in stub.ListModels(gateway_pb2.ListModelsRequest()).models}
        assert listed["flux-tiny-context"].parallelism == "context"
        assert len(listed["flux-tiny-context"].devices) == 2  # both ranks, one routing unit

        # 64x64 packs into 16 latent tokens, which split evenly over the two ranks.
        same = {"prompt": "fox", "steps": 3, "seed": 8, "width": 64, "height": 64}
        reference = generate(stub, model="flux-tiny", **same)
        split = generate(stub, model="flux-tiny-context", **same)
        difference = np.abs(split - reference)
        assert difference.max() <= MAX_LEVELS
        assert difference.mean() < MEAN_LEVELS
        assert reference.std() > 0  # a blank image would match anything
