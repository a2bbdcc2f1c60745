"""A model compiled per shape (gpu.compile, dynamic false) keeps a compiled graph for every
batch size the scheduler sends, and warms them all: dynamo's default recompile_limit (8)
ran the 9th size eager, silently. Traced with the eager backend on the CPU; the graphs
dynamo made are counted."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.models.gpu_setup import compile_denoiser
from mediamesh.worker.warming import warmup_batches

MAX_BATCH = 12


class Block(torch.nn.Module):
    # Not a bare torch.nn layer: dynamo does not trace into torch's own modules' code.
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Stack(torch.nn.Module):
    """Repeated blocks of one class, as a transformer's, without `_repeated_blocks`."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def compiled(warmup: list[dict[str, int]], dynamic: bool = False) -> ModelSpec:
    spec = load_registry().get("flux-tiny")
    assert spec is not None
    data = spec.model_dump()
    data["gpu"]["compile"] = {"mode": "regional", "backend": "eager", "dynamic": dynamic}
    data["batching"]["max_batch"] = MAX_BATCH
    data["warmup"] = warmup
    return ModelSpec.model_validate(data)


@pytest.fixture
def fresh_dynamo():
    # The limits are per process: config.patch puts them back after the test (a
    # monkeypatch.setattr undo left dynamo's config without the key for later tests).
    with torch._dynamo.config.patch(
        recompile_limit=torch._dynamo.config.recompile_limit,
        accumulated_recompile_limit=torch._dynamo.config.accumulated_recompile_limit,
    ):
        torch._dynamo.reset()
        counters.clear()
        yield
    torch._dynamo.reset()


def test_every_batch_size_up_to_max_batch_runs_compiled(fresh_dynamo) -> None:
    stack = Stack()
    compile_denoiser(compiled([{"steps": 1, "batch": 1}]), stack)
    with torch.inference_mode():
        for size in range(1, MAX_BATCH + 1):
            stack(torch.randn(size, 4, 8))
    # One graph per size; at the default limit the sizes past 8 ran eager.
    assert counters["stats"]["unique_graphs"] == MAX_BATCH
    assert torch._dynamo.config.recompile_limit >= MAX_BATCH


def test_warm_up_of_a_per_shape_compiled_model_runs_every_batch_size() -> None:
    sizes = [len(batch) for batch in warmup_batches(compiled([{"steps": 1, "batch": 2}]))]
    assert sizes == list(range(1, MAX_BATCH + 1))
    # Dynamic shapes compile once for all sizes: the listed shape alone.
    assert [len(b) for b in warmup_batches(compiled([{"batch": 2}], dynamic=True))] == [2]
