"""A stand-in for the scheduler's SubmitAndWatch behind JobLink, shared by its unit and
service tests: each job behaves as its model's name says."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mediamesh.common.errors import ResourceExhausted
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2


class StandIn:
    """Follows a job by its model's name: "refused" (a full queue, with `retry_after_s`),
    "crash" (a bug), "hold" (queued until stopped or released), "slow-submit" (its submit
    takes until `submitted` is set, then as "hold"), or any other, whose queued state and
    result come at once. The job's id is its prompt; its result holds `result_bytes` bytes,
    or the prompt when None. `cancel` cancels as the Cancel rpc would, recording the job."""

    def __init__(self, result_bytes: int | None = None, retry_after_s: float = 1.5) -> None:
        self.result_bytes = result_bytes
        self.retry_after_s = retry_after_s
        # The prompts of "hold" jobs whose following was stopped.
        self.stopped: list[str] = []
        self.release = asyncio.Event()
        self.submitted = asyncio.Event()
        # (job id, tenant) of each job cancelled.
        self.cancelled: list[tuple[str, str]] = []

    async def cancel(self, job_id: str, tenant: str) -> None:
        self.cancelled.append((job_id, tenant))

    async def follow(
        self, submit: scheduler_pb2.SubmitRequest, carrier: dict[str, str]
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        prompt = submit.request.prompt
        model = submit.request.model
        if model == "refused":
            raise ResourceExhausted("the image queue is full", retry_after_s=self.retry_after_s)
        if model == "crash":
            raise RuntimeError("a bug")
        if model == "slow-submit":
            await self.submitted.wait()
        yield common_pb2.GenerateEvent(job_id=prompt, state=common_pb2.QUEUED)
        if model in ("hold", "slow-submit"):
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.stopped.append(prompt)
                raise
        data = prompt.encode() if self.result_bytes is None else b"x" * self.result_bytes
        result = common_pb2.Result(data=data)
        yield common_pb2.GenerateEvent(job_id=prompt, state=common_pb2.SUCCEEDED, result=result)
