"""Cancel and preempt decisions shared by all ranks of a tensor-parallel group.

Only rank 0 sees the real BatchControl (the gRPC side flips it at any moment). If ranks
read it independently they could stop at different steps and deadlock in a collective,
so rank 0 broadcasts a snapshot of the flags at every decision point and every rank,
rank 0 included, decides from that snapshot.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from mediamesh.worker.core.batch import ControlView


class SyncedControl:
    """BatchControl's read side, frozen between `sync()` calls."""

    def __init__(
        self, job_ids: list[str], source: ControlView | None, device: torch.device
    ) -> None:
        self._job_ids = list(job_ids)
        self._source = source
        self._device = device
        self._cancelled: set[str] = set()
        self._preempt = False

    def sync(self, _step: int = 0) -> None:
        """A collective: every rank must call it at the same points of a batch."""
        flags = torch.zeros(len(self._job_ids) + 1, dtype=torch.int32, device=self._device)
        if self._source is not None:
            flags[0] = int(self._source.preempt_requested)
            for index, job_id in enumerate(self._job_ids):
                flags[index + 1] = int(self._source.is_cancelled(job_id))
        dist.broadcast(flags, src=0)
        values = flags.tolist()
        self._preempt = bool(values[0])
        self._cancelled = {j for j, flag in zip(self._job_ids, values[1:], strict=True) if flag}

    def agree_on_outcome(self, out_of_memory: bool, failed: bool) -> tuple[bool, bool]:
        """A collective after each attempt at a group: whether any rank ran out of memory,
        and whether any failed otherwise. Every rank calls it, whatever its own outcome."""
        flags = torch.tensor(
            [int(out_of_memory), int(failed)], dtype=torch.int32, device=self._device
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        any_out_of_memory, any_failed = flags.tolist()
        return bool(any_out_of_memory), bool(any_failed)

    def is_cancelled(self, job_id: str) -> bool:
        return job_id in self._cancelled

    @property
    def preempt_requested(self) -> bool:
        return self._preempt

    @property
    def all_cancelled(self) -> bool:
        return all(j in self._cancelled for j in self._job_ids)
