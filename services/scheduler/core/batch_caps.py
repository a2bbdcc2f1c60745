"""Batch ceilings learned from out-of-memory splits, per model and job shape.

A worker whose batch ran out of device memory retries it in halves and says how large a
batch it now runs ("oom_split" notices). The dispatcher then forms batches of that model
and shape no larger, so the split is paid once, not on every batch. Pure.
"""

from __future__ import annotations

from mediamesh.common.generation import GenerationParams

# (width, height, num_frames, duration_s): what decides a job's activation memory.
Shape = tuple[int, int, int, float]


def shape_of(params: GenerationParams) -> Shape:
    """The memory-relevant size of a job."""
    return (params.width, params.height, params.num_frames, params.duration_s)


class BatchCaps:
    """The learned ceilings; lower only (a ceiling is never raised again in this process)."""

    def __init__(self) -> None:
        self._caps: dict[tuple[str, Shape], int] = {}

    def learn(self, model: str, params: GenerationParams, fitted: int) -> bool:
        """Batches of `model` at `params`' shape larger than `fitted` ran out of memory;
        True when that lowered the ceiling."""
        key = (model, shape_of(params))
        fitted = max(fitted, 1)
        if fitted >= self._caps.get(key, fitted + 1):
            return False
        self._caps[key] = fitted
        return True

    def limit(self, model: str, params: GenerationParams, configured: int) -> int:
        """The batch size to form for a lead job: the registry's, or the learned ceiling."""
        cap = self._caps.get((model, shape_of(params)))
        return configured if cap is None else min(configured, cap)

    def known(self) -> dict[tuple[str, Shape], int]:
        """Every learned ceiling (a copy)."""
        return dict(self._caps)
