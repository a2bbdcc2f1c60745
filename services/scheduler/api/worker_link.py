"""The scheduler's gRPC client to workers: RunBatch streams and cancels."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from mediamesh.v1 import worker_pb2, worker_pb2_grpc

from services.common.api import worker_wire
from services.common.channels import internal_channel
from services.worker.core.batch import JobParams, WorkerEvent

log = logging.getLogger(__name__)


class GrpcWorkerLink:
    def __init__(self, token: str | None, max_message_bytes: int) -> None:
        self._token = token
        self._max = max_message_bytes
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> worker_pb2_grpc.WorkerStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = internal_channel(address, self._token, self._max)
            self._channels[address] = channel
        return worker_pb2_grpc.WorkerStub(channel)

    async def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams]
    ) -> AsyncIterator[WorkerEvent]:
        request = worker_pb2.RunBatchRequest(
            batch_id=batch_id, model=model, jobs=[worker_wire.job_spec(j, 0) for j in jobs]
        )
        call = self._stub(address).RunBatch(request)
        try:
            async for message in call:
                event = worker_wire.worker_event(message)
                if event is not None:
                    yield event
        finally:
            call.cancel()

    async def cancel(self, address: str, job_ids: list[str]) -> None:
        try:
            await self._stub(address).Cancel(
                worker_pb2.CancelJobsRequest(job_ids=job_ids), timeout=5
            )
        except grpc.aio.AioRpcError as exc:
            log.warning("cancel on %s failed: %s", address, exc.details())

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
