"""Warm-up shapes in the registry, the ListModels label, and `mediamesh status`."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.cli.status_table import render
from mediamesh.common.generated.v1 import scheduler_pb2
from mediamesh.common.registry import RegistryError, parse_registry
from mediamesh.common.warmup import warmup_label

BASE: dict[str, Any] = {
    "name": "m",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "batching": {"max_batch": 4},
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 128, "max_height": 128, "size_multiple": 16},
}


def test_shapes_parse_with_defaults() -> None:
    spec = parse_registry({"models": [{**BASE, "warmup": [{"width": 128, "batch": 4}]}]}).models[0]
    (shape,) = spec.warmup
    assert (shape.width, shape.height, shape.steps, shape.batch) == (128, 0, 1, 4)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"width": 256}, r"warmup\[0\].width: 256 exceeds limits.max_width \(128\)"),
        ({"batch": 8}, r"warmup\[0\].batch: 8 exceeds batching.max_batch \(4\)"),
        ({"height": 40}, r"warmup\[0\].height: 40 is not a multiple"),
        ({"steps": 0}, "warmup.0.steps: Input"),
    ],
)
def test_shapes_past_the_limits_are_refused(shape: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=f"model 'm' field .*{message}"):
        parse_registry({"models": [{**BASE, "warmup": [shape]}]})


def test_list_models_label() -> None:
    warmed = parse_registry({"models": [{**BASE, "warmup": [{}]}]}).models[0]
    plain = parse_registry({"models": [BASE]}).models[0]
    assert warmup_label(plain, served=True, warming=False) == "none"
    assert warmup_label(warmed, served=False, warming=True) == "warming"
    assert warmup_label(warmed, served=True, warming=True) == "warm"
    assert warmup_label(warmed, served=False, warming=False) == "pending"


def test_status_table_marks_warming_models() -> None:
    status = scheduler_pb2.MeshStatus(
        workers=[
            scheduler_pb2.WorkerSummary(
                worker_id="w0", models=["echo", "flux-tiny"], warming=["flux-tiny"]
            )
        ]
    )
    row = next(line for line in render(status).splitlines() if line.startswith("w0"))
    assert "echo,flux-tiny (warming)" in row
