"""The gateway's end of JobLink: its callers' jobs over one stream to the scheduler.

Each job used to be a SubmitAndWatch call of its own; here jobs are exchanges on one
long-lived stream (`mediamesh.v1.Scheduler.JobLink`), opened when first needed and again
after it breaks. A stream that breaks ends every open exchange with the error its own call
would have ended with; the jobs themselves run on. (Jobs with latent previews keep a call of
their own: see `Upstream.submit_and_watch`.)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping

import grpc
from opentelemetry.trace import SpanKind, Status
from opentelemetry.trace import StatusCode as SpanStatus

from mediamesh.common.api.multiplexed import StreamClient
from mediamesh.common.api.status import from_number
from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.telemetry import (
    JOB_LINK_EXCHANGE_SPAN,
    is_server_fault,
    span_trace_carrier,
    tracer,
)
from mediamesh.gateway.metrics import JOB_LINK_EXCHANGES, JOB_LINK_STREAMS

# An exchange ends after one of these events (as does a SubmitAndWatch call).
FINAL_EVENTS = ("result", "error")

_tracer = tracer(__name__)
log = logging.getLogger(__name__)

# What an exchange's inbox holds: the job's events, then possibly the error that ended it.
_Arrival = common_pb2.GenerateEvent | MeshError
# The error a broken stream ends its exchanges with, from the call's failure (None: the
# scheduler ended the stream itself).
LinkError = Callable[[grpc.aio.AioRpcError | None], MeshError]


# How long jobs skip the link after the scheduler refused it as unknown.
RETRY_UNSUPPORTED_S = 60.0


class JobLink:
    """Exchanges over the current stream to the scheduler; a new stream once it breaks.

    `link_error` turns the stream's failure into what each open exchange raises (the same
    rewording as for any call to the scheduler).
    """

    def __init__(
        self,
        scheduler: scheduler_pb2_grpc.SchedulerStub,
        link_error: LinkError,
    ) -> None:
        self._scheduler = scheduler
        self._link_error = link_error
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        # When a stream was last refused UNIMPLEMENTED: a scheduler older than JobLink, met
        # during a rolling upgrade. The gateway then sends each job on a call of its own,
        # and tries the link again a while later (the scheduler may have been upgraded).
        self._refused_at: float | None = None

    async def follow(
        self,
        submit: scheduler_pb2.SubmitRequest,
        forwarded_trace: Mapping[str, str],
        cancel_when_left: bool = False,
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """Submit over the link and yield the job's events to its final one; a refusal or
        a broken link raises MeshError. `forwarded_trace` is the caller's trace context,
        sent when this process does not trace (a tracing one sends its own span's).

        Closed before the final event, the exchange stops; with `cancel_when_left` its job is
        cancelled too, even one whose queued event (naming it) has not arrived yet."""
        stream = self._current()
        span = _tracer.start_span(JOB_LINK_EXCHANGE_SPAN, kind=SpanKind.CLIENT)
        trace_context = span_trace_carrier(span) or dict(forwarded_trace)
        exchange_id = next(self._ids)
        inbox = stream.open(exchange_id, submit, trace_context)
        JOB_LINK_EXCHANGES.inc()
        ended = False
        try:
            while True:
                arrival = await inbox.get()
                if isinstance(arrival, MeshError):
                    ended = True
                    if is_server_fault(arrival.code):
                        span.set_status(Status(SpanStatus.ERROR, arrival.message))
                    # A broken stream hands every exchange the same error: each raises its own.
                    raise MeshError(
                        arrival.message, code=arrival.code, retry_after_s=arrival.retry_after_s
                    )
                ended = arrival.WhichOneof("event") in FINAL_EVENTS
                yield arrival
                if ended:
                    return
        finally:
            JOB_LINK_EXCHANGES.dec()
            stream.close(exchange_id, left=not ended, cancel=cancel_when_left)
            span.end()

    async def aclose(self) -> None:
        """Close the current stream, ending its open exchanges."""
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    def _current(self) -> _Stream:
        if self._stream is None or self._stream.broken:
            self._stream = _Stream(self._scheduler, self._link_error, self._refused)
            JOB_LINK_STREAMS.inc()
        return self._stream

    def unsupported(self) -> bool:
        """Whether the scheduler refused the link lately (`RETRY_UNSUPPORTED_S`)."""
        refused_at = self._refused_at
        return refused_at is not None and time.monotonic() - refused_at < RETRY_UNSUPPORTED_S

    def _refused(self) -> None:
        self._refused_at = time.monotonic()


class _Stream(StreamClient[scheduler_pb2.JobLinkRequest, _Arrival]):
    """One JobLink call: a job's exchange on it, named by `exchange_id`."""

    def __init__(
        self,
        scheduler: scheduler_pb2_grpc.SchedulerStub,
        link_error: LinkError,
        refused: Callable[[], None],
    ) -> None:
        self._link_error = link_error
        self._refused = refused
        super().__init__(
            scheduler.JobLink(),
            "JobLink",
            lambda pack: scheduler_pb2.JobLinkRequests(requests=pack),
        )

    def open(
        self,
        exchange_id: int,
        submit: scheduler_pb2.SubmitRequest,
        trace_context: dict[str, str],
    ) -> asyncio.Queue[_Arrival]:
        inbox: asyncio.Queue[_Arrival] = asyncio.Queue()
        self._inboxes[exchange_id] = inbox
        self._send(
            scheduler_pb2.JobLinkRequest(
                exchange_id=exchange_id, submit=submit, trace_context=trace_context
            )
        )
        return inbox

    def close(self, exchange_id: int, left: bool, cancel: bool) -> None:
        """Forget the exchange; one its caller `left` is stopped at the scheduler, and with
        `cancel` its job is cancelled there too."""
        if self._inboxes.pop(exchange_id, None) is None or not left or self.broken:
            return
        if cancel:
            self._send(scheduler_pb2.JobLinkRequest(exchange_id=exchange_id, cancel=True))
        else:
            self._send(scheduler_pb2.JobLinkRequest(exchange_id=exchange_id, stop=True))

    def _broken_by(self, failure: grpc.aio.AioRpcError | None) -> _Arrival:
        if failure is not None and failure.code() is grpc.StatusCode.UNIMPLEMENTED:
            self._refused()  # before the exchanges learn of it: they fall back on it
        return self._link_error(failure)

    def _closed(self) -> _Arrival:
        return MeshError("the gateway is shutting down", code=StatusCode.UNAVAILABLE)

    def _gave_up(self, part: str) -> _Arrival:
        return MeshError(
            "the gateway's link to the scheduler failed; retry", code=StatusCode.UNAVAILABLE
        )

    def _route(self, event: scheduler_pb2.JobLinkEvent) -> None:
        inbox = self._inboxes.get(event.exchange_id)
        if inbox is None:
            return  # stopped: its caller left
        if event.HasField("status"):
            status = event.status
            code = from_number(status.code)
            if code is StatusCode.OK:
                code = StatusCode.UNKNOWN  # an exchange never ends OK without its final event
            inbox.put_nowait(
                MeshError(
                    status.message or code.value,
                    code=code,
                    retry_after_s=status.retry_after_ms / 1000,
                )
            )
            del self._inboxes[event.exchange_id]
            return
        inbox.put_nowait(event.event)
        if event.event.WhichOneof("event") in FINAL_EVENTS:
            del self._inboxes[event.exchange_id]
