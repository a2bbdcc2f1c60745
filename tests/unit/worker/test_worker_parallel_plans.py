from __future__ import annotations

import torch

from mediamesh.worker.parallel.flux_tp import interleave_packed_columns
from mediamesh.worker.parallel.pipeline_mode import accelerate_max_memory


def test_registry_memory_keys_become_accelerate_keys() -> None:
    limits = {"cuda:1": "10GiB", "cuda": "8GiB", "cpu": "2GiB", "disk": "50GiB"}
    assert accelerate_max_memory(limits) == {1: "10GiB", 0: "8GiB", "cpu": "2GiB", "disk": "50GiB"}


def test_reordered_packed_columns_let_each_rank_use_its_local_slices() -> None:
    torch.manual_seed(0)
    attention, mlp, size = 8, 12, 2
    weight = torch.randn(5, attention + mlp)
    x = torch.randn(3, attention + mlp)
    reordered = interleave_packed_columns(weight, [attention, mlp], size)
    shard = (attention + mlp) // size
    total = torch.zeros(3, 5)
    for rank in range(size):
        # What rank r holds after column-parallel attention and MLP: its slice of each half.
        a = x[:, rank * attention // size : (rank + 1) * attention // size]
        m = x[:, attention + rank * mlp // size : attention + (rank + 1) * mlp // size]
        local = torch.cat([a, m], dim=1)
        total += local @ reordered[:, rank * shard : (rank + 1) * shard].T
    torch.testing.assert_close(total, x @ weight.T)
