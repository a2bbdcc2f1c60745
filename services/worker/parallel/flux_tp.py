"""Tensor-parallel sharding of a Flux transformer with PyTorch's DTensor plans.

Attention heads and the feed-forward hidden units are split over the ranks: q/k/v and the
first FFN projection are column-parallel (each rank computes its heads), the output
projections row-parallel (partial sums all-reduced). Embedders, norms and the final
projection stay replicated; they are a small share of the work.

A single-stream block's `proj_out` reads `cat([attention, mlp])`. Each rank holds a slice
of both halves, which is not a contiguous slice of proj_out's inputs; its input columns
are reordered so that rank r's contiguous shard is [attention slice r, mlp slice r].
"""

from __future__ import annotations

import torch
from diffusers import FluxTransformer2DModel
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from mediamesh.worker.models.preflight import split_problem

_DOUBLE_STREAM_PLAN = {
    "attn.to_q": "col",
    "attn.to_k": "col",
    "attn.to_v": "col",
    "attn.add_q_proj": "col",
    "attn.add_k_proj": "col",
    "attn.add_v_proj": "col",
    "attn.to_out.0": "row",
    "attn.to_add_out": "row",
    "ff.net.0.proj": "col",
    "ff.net.2": "row",
    "ff_context.net.0.proj": "col",
    "ff_context.net.2": "row",
}
_SINGLE_STREAM_PLAN = {
    "attn.to_q": "col",
    "attn.to_k": "col",
    "attn.to_v": "col",
    "proj_mlp": "col",
    "proj_out": "row",
}


def _styles(plan: dict[str, str]) -> dict[str, ParallelStyle]:
    return {
        name: ColwiseParallel() if kind == "col" else RowwiseParallel()
        for name, kind in plan.items()
    }


def check_divisible(transformer: FluxTransformer2DModel, size: int) -> None:
    config = transformer.config
    problem = split_problem(config.num_attention_heads, config.attention_head_dim, size)
    if problem is not None:
        raise ValueError(problem)


def interleave_packed_columns(weight: torch.Tensor, blocks: list[int], size: int) -> torch.Tensor:
    """Reorders input columns [A | B] into [A0 B0 | A1 B1 | ...] for `size` ranks."""
    starts = [sum(blocks[:i]) for i in range(len(blocks))]
    order: list[int] = []
    for rank in range(size):
        for start, width in zip(starts, blocks, strict=True):
            shard = width // size
            order.extend(range(start + rank * shard, start + (rank + 1) * shard))
    return weight[:, torch.tensor(order, device=weight.device)]


@torch.no_grad()
def shard_flux_transformer(transformer: FluxTransformer2DModel, mesh: DeviceMesh) -> None:
    """Shards in place; every rank must call it with identical weights."""
    size = mesh.size()
    check_divisible(transformer, size)
    for block in transformer.transformer_blocks:
        parallelize_module(block, mesh, _styles(_DOUBLE_STREAM_PLAN))
        block.attn.heads //= size
    for block in transformer.single_transformer_blocks:
        blocks = [block.attn.inner_dim, block.mlp_hidden_dim]
        block.proj_out.weight.copy_(interleave_packed_columns(block.proj_out.weight, blocks, size))
        parallelize_module(block, mesh, _styles(_SINGLE_STREAM_PLAN))
        block.attn.heads //= size
