"""The scheduler's end of BatchLink: a worker's batches over one stream to it.

Each batch used to be a RunBatch call of its own; here batches are named by their ids on one
long-lived stream per worker (`mediamesh.v1.Worker.BatchLink`), opened when first needed and
again after it breaks. A batch keeps a call's outcomes: never taken (`BatchUndelivered`),
its worker gone (`WorkerGone`), or ended with a status; a stream that breaks ends each open
batch as its own call would have ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import NoReturn

import grpc
from opentelemetry.trace import Span, SpanKind, Status
from opentelemetry.trace import StatusCode as SpanStatus

from mediamesh.common.api import worker_wire
from mediamesh.common.api.multiplexed import StreamClient
from mediamesh.common.api.status import from_number
from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from mediamesh.common.telemetry import (
    BATCH_LINK_BATCH_SPAN,
    is_server_fault,
    span_trace_carrier,
    tracer,
)
from mediamesh.common.work import WorkerEvent
from mediamesh.scheduler.batches import BatchUndelivered, WorkerGone

_tracer = tracer(__name__)
log = logging.getLogger(__name__)


class LinkUnsupported(Exception):
    """The worker has no BatchLink (an older release): its batches go by RunBatch calls."""


@dataclass(frozen=True)
class _Broken:
    """What a stream that broke hands each open batch: the call's code and details."""

    code: grpc.StatusCode
    details: str


_Arrival = worker_pb2.BatchLinkEvent | _Broken


class BatchStream(StreamClient[worker_pb2.BatchLinkRequest, _Arrival]):
    """One BatchLink call: a batch on it, named by its batch id."""

    def __init__(self, worker: worker_pb2_grpc.WorkerStub) -> None:
        super().__init__(
            worker.BatchLink(),
            "BatchLink",
            lambda pack: worker_pb2.BatchLinkRequests(requests=pack),
        )

    async def run(
        self, request: worker_pb2.RunBatchRequest, first_job_trace: Mapping[str, str]
    ) -> AsyncIterator[list[WorkerEvent]]:
        """The batch's events, a message's together, until it ends (see `GrpcWorkerLink`).
        Sent under the current span (the scheduler's `batch`), as a call would have been;
        without one (this process does not trace), with `first_job_trace`."""
        batch_id = request.batch_id
        if self.broken:
            raise BatchUndelivered("UNAVAILABLE: the BatchLink stream had just broken")
        if batch_id in self._inboxes:
            raise BatchUndelivered(f"INVALID_ARGUMENT: batch {batch_id} is already open here")
        span = _tracer.start_span(BATCH_LINK_BATCH_SPAN, kind=SpanKind.CLIENT)
        inbox: asyncio.Queue[_Arrival] = asyncio.Queue()
        self._inboxes[batch_id] = inbox
        trace_context = span_trace_carrier(span) or dict(first_job_trace)
        self._send(worker_pb2.BatchLinkRequest(run=request, trace_context=trace_context))
        accepted = ended = False
        try:
            while True:
                arrival = await inbox.get()
                if isinstance(arrival, _Broken):
                    ended = True
                    _raise_broken(arrival, accepted, span)
                outcome = arrival.WhichOneof("outcome")
                if outcome == "accepted":
                    accepted = True
                elif outcome == "event":
                    events = worker_wire.worker_events(arrival.event)
                    if events:
                        yield events
                elif outcome == "end":
                    ended = True
                    _raise_unless_ok(arrival.end, accepted, span)
                    return
        finally:
            if self._inboxes.get(batch_id) is inbox:
                del self._inboxes[batch_id]
                if not ended and not self.broken:
                    # Left before its end: the batch stops there, as a cancelled call did.
                    self._send(worker_pb2.BatchLinkRequest(stop=batch_id))
            span.end()

    def _broken_by(self, failure: grpc.aio.AioRpcError | None) -> _Arrival:
        if failure is None:
            # The worker ended the stream (it is stopping): what is open there will not end.
            return _Broken(grpc.StatusCode.UNAVAILABLE, "the worker closed its BatchLink")
        return _Broken(failure.code(), failure.details() or failure.code().name)

    def _closed(self) -> _Arrival:
        return _Broken(grpc.StatusCode.CANCELLED, "the link to the worker was closed")

    def _gave_up(self, part: str) -> _Arrival:
        return _Broken(grpc.StatusCode.UNKNOWN, f"the scheduler's BatchLink {part} failed")

    def _route(self, event: worker_pb2.BatchLinkEvent) -> None:
        inbox = self._inboxes.get(event.batch_id)
        if inbox is not None:  # else stopped: the scheduler left it
            inbox.put_nowait(event)


def _raise_broken(broken: _Broken, accepted: bool, span: Span) -> NoReturn:
    """The stream broke with the batch open: what its own call's failure would have raised."""
    what = f"{broken.code.name}: {broken.details}"
    span.set_status(Status(SpanStatus.ERROR, what))
    if broken.code is grpc.StatusCode.UNIMPLEMENTED and not accepted:
        raise LinkUnsupported(what)
    if not accepted:
        raise BatchUndelivered(what)
    if broken.code is grpc.StatusCode.UNAVAILABLE:
        raise WorkerGone(what)
    raise MeshError(broken.details, code=StatusCode[broken.code.name])


def _raise_unless_ok(end: worker_pb2.BatchEnd, accepted: bool, span: Span) -> None:
    code = from_number(end.code)
    if code is StatusCode.OK:
        return
    what = f"{code.name}: {end.message}"
    if is_server_fault(code.value):
        span.set_status(Status(SpanStatus.ERROR, what))
    if not accepted:
        raise BatchUndelivered(what)
    if code is StatusCode.UNAVAILABLE:
        # What a RunBatch call that failed UNAVAILABLE raised (its devices are gone).
        raise WorkerGone(what)
    raise MeshError(end.message or code.value, code=code)
