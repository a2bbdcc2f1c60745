"""Counting the new jobs the gateway's gRPC faces refuse before their servicer runs.

A request past a field's limit, or one that does not parse, is refused by the lenient
registration (`mediamesh.common.api.lenient`) before the DataPlane sees it, so the DataPlane's
own count of refusals never hears of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediamesh.common.api.lenient import OnRefused
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.registry import Registry
from mediamesh.gateway import metrics


def counting_refused_jobs(registry: Registry, model_field_of: Mapping[str, str]) -> OnRefused:
    """An `on_refused` hook counting one refused job for each refused call of a method in
    `model_field_of`, which maps the methods that start jobs to their request's field that
    names the model (the queue the refusal is counted under)."""

    def count(method: str, request: Any, error: InvalidArgument) -> None:
        field = model_field_of.get(method)
        if field is None:
            return
        queue = metrics.queue_of(registry, getattr(request, field, None))
        metrics.count_refused(error, queue)

    return count
