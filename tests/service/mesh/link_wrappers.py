"""The scheduler's real worker link, wrapped by a test that watches or disturbs its batches:
a wrapper overrides `run_batch` and leaves the rest to the link it wraps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.scheduler.batches import WorkerLink


class ForwardingLink:
    """Every call passed on to `link` unchanged."""

    def __init__(self, link: WorkerLink) -> None:
        self._link = link

    def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: Any
    ) -> AsyncIterator[list[WorkerEvent]]:
        return self._link.run_batch(address, batch_id, model, jobs, **options)

    def reset(self, address: str) -> None:
        self._link.reset(address)

    async def cancel(self, address: str, job_ids: list[str]) -> None:
        await self._link.cancel(address, job_ids)

    async def close(self) -> None:
        await self._link.close()
