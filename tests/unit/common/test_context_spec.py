"""`parallelism: {mode: context, ulysses, ring}`: degrees validated, naming entry and field."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.registry import RegistryError, parse_registry

BASE: dict[str, Any] = {
    "name": "split",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 64, "max_height": 64},
}


def parallelism(**fields: Any) -> Any:
    return parse_registry({"models": [{**BASE, "parallelism": fields}]}).models[0].parallelism


def test_degrees_multiply_into_the_group_size() -> None:
    options = parallelism(
        mode="context", ulysses=2, ring=2, devices=[f"cuda:{i}" for i in range(4)]
    )
    assert options.ranks == 4
    assert parallelism(mode="context", ulysses=2).ranks == 2  # devices default to the worker's
    assert parallelism(mode="tensor", size=3).ranks == 3
    assert parallelism().ranks == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "context"}, r"parallelism.ulysses: context mode needs ulysses \* ring >= 2"),
        ({"mode": "context", "ring": 0}, "ring: Input should be greater than or equal to 1"),
        (
            {"mode": "context", "ulysses": 2, "devices": ["cuda:0", "cuda:1", "cuda:2"]},
            r"parallelism.devices: 3 devices listed, but ulysses \* ring = 2 \* 1 = 2",
        ),
        ({"mode": "tensor", "ulysses": 2}, "parallelism.ulysses: only context mode takes it"),
        ({"mode": "sequence"}, "mode: Input should be"),
    ],
)
def test_impossible_groups_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=f"model 'split' field parallelism.*{message}"):
        parallelism(**fields)
