"""The scheduler's gRPC client to workers: batches (over each worker's BatchLink stream, or
RunBatch calls for a worker without one) and cancels."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

import grpc

from mediamesh.common.api import worker_wire
from mediamesh.common.channels import internal_channel
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from mediamesh.common.telemetry import forwarded_trace
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.scheduler.api.batch_link import BatchStream, LinkUnsupported
from mediamesh.scheduler.batches import BatchUndelivered, WorkerGone

log = logging.getLogger(__name__)

# A batch whose request or results may be larger than this takes a RunBatch call of its own:
# on the shared stream its bytes would hold every other batch's messages behind them while
# they cross (a megabyte is about 8 ms at 1 Gbit/s), and a batch that large runs long enough
# that a call's set-up (about a millisecond) is nothing beside it.
LINK_MAX_BATCH_BYTES = 1 << 20
# What the estimate of a result's size counts: raw 8-bit RGB per pixel of each frame, and
# 48 kHz stereo float samples per second of audio (encoded results are smaller).
_BYTES_PER_PIXEL = 3
_AUDIO_BYTES_PER_S = 48_000 * 2 * 4


def results_estimate_bytes(jobs: list[JobParams]) -> int:
    """About the most bytes a batch's results take (see `_BYTES_PER_PIXEL`)."""
    total = 0.0
    for job in jobs:
        g = job.generation
        frames = max(g.num_frames, 1)
        total += max(
            g.width * g.height * frames * _BYTES_PER_PIXEL, g.duration_s * _AUDIO_BYTES_PER_S
        )
    return int(total)


class GrpcWorkerLink:
    """The scheduler's WorkerLink over gRPC, keeping one channel per worker address."""

    def __init__(self, credentials: InternalCredentials, max_message_bytes: int) -> None:
        self._credentials = credentials
        self._max = max_message_bytes
        self._channels: dict[str, grpc.aio.Channel] = {}
        # A stub builds a callable per rpc: built once per channel, not once per batch.
        self._stubs: dict[str, worker_pb2_grpc.WorkerStub] = {}
        # Each worker's BatchLink stream, opened for its first batch and again once broken.
        self._streams: dict[str, BatchStream] = {}
        # Workers that answered BatchLink UNIMPLEMENTED (an older release): a call per batch.
        self._calls_only: set[str] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def _stub(self, address: str) -> worker_pb2_grpc.WorkerStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = internal_channel(address, self._credentials, self._max)
            self._channels[address] = channel
            stub = self._stubs[address] = worker_pb2_grpc.WorkerStub(channel)
        return stub

    async def run_batch(
        self,
        address: str,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        trace_context: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[WorkerEvent]]:
        """Runs a batch on the worker at `address`, yielding its events until the batch ends,
        those of one message together; `pause_batch_id` names a batch there to pause for it
        (urgent work). `trace_context` is the batch's trace, sent when this process does not
        trace (a tracing one sends its own span's), so the worker's log lines name it.

        A small batch goes over the worker's BatchLink stream, a large one (LINK_MAX_BATCH_BYTES)
        by a RunBatch call. Raises BatchUndelivered when the worker never took the batch,
        WorkerGone when its connection broke after (or its devices are gone); other failures
        propagate.
        Closing the iterator stops the batch there.
        """
        request = worker_pb2.RunBatchRequest(
            batch_id=batch_id,
            model=model,
            jobs=[worker_wire.job_spec(j, 0) for j in jobs],
            pause_batch_id=pause_batch_id,
        )
        small = (
            request.ByteSize() <= LINK_MAX_BATCH_BYTES
            and results_estimate_bytes(jobs) <= LINK_MAX_BATCH_BYTES
        )
        if small and address not in self._calls_only:
            try:
                async for events in self._stream(address).run(request, trace_context or {}):
                    yield events
                return
            except LinkUnsupported:
                log.info("worker at %s has no BatchLink; its batches go by RunBatch", address)
                self._calls_only.add(address)
        async for events in self._run_by_call(address, request, trace_context or {}):
            yield events

    def _stream(self, address: str) -> BatchStream:
        stream = self._streams.get(address)
        if stream is None or stream.broken:
            stream = self._streams[address] = BatchStream(self._stub(address))
        return stream

    async def _run_by_call(
        self,
        address: str,
        request: worker_pb2.RunBatchRequest,
        trace_context: Mapping[str, str],
    ) -> AsyncIterator[list[WorkerEvent]]:
        call = self._stub(address).RunBatch(request, metadata=forwarded_trace(trace_context))
        try:
            metadata = await call.initial_metadata()
            if metadata.get(worker_wire.BATCH_ACCEPTED_KEY) is None:
                code = await call.code()
                raise BatchUndelivered(f"{code.name}: {await call.details()}")
            try:
                async for message in call:
                    events = worker_wire.worker_events(message)
                    if events:
                        yield events
            except grpc.aio.AioRpcError as exc:
                # How gRPC reports a peer gone mid-call (reset, socket closed, GOAWAY).
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    raise WorkerGone(f"{exc.code().name}: {exc.details()}") from exc
                raise
        finally:
            call.cancel()

    def reset(self, address: str) -> None:
        """Drop the channel to `address`: a worker registering again there must not inherit
        a channel still backing off from its predecessor's death (nor its stream, nor the
        way its predecessor took batches)."""
        self._calls_only.discard(address)
        stream = self._streams.pop(address, None)
        if stream is not None:
            self._close_later(stream.aclose())
        self._stubs.pop(address, None)
        channel = self._channels.pop(address, None)
        if channel is not None:
            self._close_later(channel.close())

    def _close_later(self, closing: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def cancel(self, address: str, job_ids: list[str]) -> None:
        """Asks the worker at `address` to cancel `job_ids`; a failure is logged, never raised."""
        try:
            await self._stub(address).Cancel(
                worker_pb2.CancelJobsRequest(job_ids=job_ids), timeout=5
            )
        except grpc.aio.AioRpcError as exc:
            log.warning("cancel on %s failed: %s", address, exc.details())

    async def close(self) -> None:
        """Closes every stream and channel, including those still closing after `reset`."""
        for stream in self._streams.values():
            await stream.aclose()
        self._streams.clear()
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
