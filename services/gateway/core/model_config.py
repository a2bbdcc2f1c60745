"""Triton's model configuration and repository index of registry models, as plain data.

The shapes are those Triton's HTTP API answers with (`GET /v2/models/{m}/config`,
`POST /v2/repository/index`); the gRPC face parses the same dicts into its messages, so
both say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mediamesh.common.errors import NotFound
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway.core.inference_call import (
    MODEL_VERSION,
    NEGATIVE_PROMPT,
    OUTPUTS,
    model_inputs,
    platform_of,
)

# The protocol's tensor datatypes as a model configuration's DataType names them.
_CONFIG_TYPES = {"BYTES": "TYPE_STRING", "INT64": "TYPE_INT64"}
# What the workers run every model with.
BACKEND = "diffusers"
READY, UNAVAILABLE = "READY", "UNAVAILABLE"


def model_config(spec: ModelSpec) -> dict[str, Any]:
    """The model as Triton's model configuration describes one: its tensors as its metadata
    lists them, and no batch dimension (`max_batch_size` 0), because every `prompt` element
    is a job of its own and the mesh forms the batches."""
    return {
        "name": spec.name,
        "platform": platform_of(spec),
        "backend": BACKEND,
        "max_batch_size": 0,
        "input": [
            {
                "name": t.name,
                "data_type": _CONFIG_TYPES[t.datatype],
                "format": "FORMAT_NONE",
                "dims": list(t.shape),
                # Input images a model lists are required, like the prompt.
                "optional": t.name == NEGATIVE_PROMPT,
            }
            for t in model_inputs(spec)
        ],
        "output": [
            {"name": t.name, "data_type": _CONFIG_TYPES[t.datatype], "dims": list(t.shape)}
            for t in OUTPUTS
        ],
    }


def repository_index(
    names: Iterable[str], unready: Mapping[str, str], *, ready_only: bool = False
) -> list[dict[str, str]]:
    """Each model by name with its state: READY, or UNAVAILABLE with the reason `unready`
    gives for it. `ready_only`: the READY ones alone."""
    index = []
    for name in sorted(names):
        reason = unready.get(name)
        if reason is not None and ready_only:
            continue
        index.append(
            {
                "name": name,
                "version": MODEL_VERSION,
                "state": READY if reason is None else UNAVAILABLE,
                "reason": reason or "",
            }
        )
    return index


def check_repository(name: str) -> None:
    """NotFound unless `name` is the one repository's, the empty string: the registry."""
    if name:
        raise NotFound(
            f"repository_name: no repository {name!r}; the gateway has one, the registry, "
            "named by the empty string"
        )


def unready_reason(warmup: str) -> str:
    """Why a model is not ready, from its warm-up state (ModelInfo.warmup)."""
    if warmup == "warming":
        return "warming up: a worker is running the entry's listed shapes"
    return "no live worker hosts it"
