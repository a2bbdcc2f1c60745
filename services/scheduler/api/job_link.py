"""JobLink: a gateway's SubmitAndWatch exchanges over one long-lived stream.

A call per job costs both ends gRPC's per-call set-up and tear-down (`bench.grpc_hops`: about
a quarter of a millisecond of CPU on each side under load, and a third of a millisecond of
latency). Over one stream an exchange costs a message each way, and a message carries
whatever was waiting when it was sent, so under load one message serves several jobs.

Each exchange runs as its own task and ends alone: its submit refused, its job followed to
the final event, or stopped by the gateway. The stream ends when the gateway closes its side
and the exchanges still open have ended, or when the gateway goes away (the jobs run on; only
their followers stop, as when a call per job is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable

from opentelemetry.trace import SpanKind, Status, StatusCode

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.api.packing import take_pack
from mediamesh.common.api.status import to_number
from mediamesh.common.errors import InvalidArgument, MeshError, Unavailable
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2
from mediamesh.common.telemetry import (
    JOB_LINK_EXCHANGE_SPAN,
    context_from,
    is_server_fault,
    request_trace_carrier,
    tracer,
)

log = logging.getLogger(__name__)

# Submits a job and yields its events to its end: the servicer's SubmitAndWatch.
Follow = Callable[
    [scheduler_pb2.SubmitRequest, dict[str, str]], AsyncIterator[common_pb2.GenerateEvent]
]

# Most bytes of events one message carries, unless a single event is larger: small events
# are not held behind a message that nears the gateway's limit.
PACK_BYTES = 1 << 20

_tracer = tracer(__name__)


class JobLinks:
    """A scheduler's open JobLink streams, closed together when it stops.

    A stream outlives any call, so a stopping server's grace would otherwise see a gateway go
    on submitting over it; closed, a stream refuses new submits as a stopped server refuses
    new calls, and ends once its open exchanges have.
    """

    def __init__(self) -> None:
        self._open: set[_Link] = set()
        self.closing = False

    def close(self) -> None:
        """Close every open stream, and each stream opened from now on."""
        self.closing = True
        for link in self._open:
            link.close()

    def opened(self, link: _Link) -> None:
        """Hold a stream that has just opened (closed at once when closing already)."""
        self._open.add(link)
        if self.closing:
            link.close()

    def ended(self, link: _Link) -> None:
        """Forget a stream that has ended."""
        self._open.discard(link)


async def serve_job_link(
    requests: AsyncIterator[scheduler_pb2.JobLinkRequests],
    follow: Follow,
    links: JobLinks | None = None,
) -> AsyncIterator[scheduler_pb2.JobLinkEvents]:
    """The stream's answers to `requests`, each exchange followed with `follow`; kept in
    `links` while open."""
    link = _Link(follow)
    links = links or JobLinks()
    links.opened(link)
    reader = asyncio.create_task(link.read(requests), name="job-link-reader")
    try:
        async for events in link.sent(reader):
            yield events
    finally:
        links.ended(link)
        reader.cancel()
        link.stop_all()


def exchange_status(exchange_id: int, error: MeshError) -> scheduler_pb2.JobLinkEvent:
    """The event that ends an exchange with `error`'s status."""
    return scheduler_pb2.JobLinkEvent(
        exchange_id=exchange_id,
        status=scheduler_pb2.ExchangeStatus(
            code=to_number(error.code),
            message=error.message,
            retry_after_ms=int(error.retry_after_s * 1000),
        ),
    )


class _Link:
    """One stream's open exchanges and the events waiting to be sent."""

    def __init__(self, follow: Follow) -> None:
        self._follow = follow
        self._exchanges: dict[int, asyncio.Task[None]] = {}
        self._outbox: deque[scheduler_pb2.JobLinkEvent] = deque()
        # Set when there is something to send, or an exchange or the reading ended.
        self._stirred = asyncio.Event()
        self._closing = False

    def close(self) -> None:
        """Take no more submits; end once the open exchanges have."""
        self._closing = True
        self._stirred.set()

    async def read(self, requests: AsyncIterator[scheduler_pb2.JobLinkRequests]) -> None:
        try:
            async for message in requests:
                for request in message.requests:
                    self._take(request)
        finally:
            self._stirred.set()

    async def sent(self, reader: asyncio.Task[None]) -> AsyncIterator[scheduler_pb2.JobLinkEvents]:
        while True:
            await self._stirred.wait()
            self._stirred.clear()
            while self._outbox:
                yield scheduler_pb2.JobLinkEvents(events=take_pack(self._outbox, PACK_BYTES))
            if reader.done() and (failure := reader.exception()) is not None:
                raise failure  # a message that did not parse: the whole stream is refused
            if (reader.done() or self._closing) and not self._exchanges and not self._outbox:
                return

    def stop_all(self) -> None:
        for task in self._exchanges.values():
            task.cancel()
        self._exchanges.clear()

    def _send(self, event: scheduler_pb2.JobLinkEvent) -> None:
        self._outbox.append(event)
        self._stirred.set()

    def _take(self, request: scheduler_pb2.JobLinkRequest) -> None:
        exchange_id = request.exchange_id
        action = request.WhichOneof("action")
        if action == "stop":
            running = self._exchanges.pop(exchange_id, None)
            if running is not None:
                running.cancel()
            return
        if action != "submit":
            refusal = InvalidArgument("action: an exchange opens with submit")
            self._send(exchange_status(exchange_id, refusal))
            return
        if exchange_id in self._exchanges:
            refusal = InvalidArgument(f"exchange_id: {exchange_id} is already open")
            self._send(exchange_status(exchange_id, refusal))
            return
        if self._closing:
            stopping = Unavailable("the scheduler is shutting down; retry")
            self._send(exchange_status(exchange_id, stopping))
            return
        try:
            check_bounds(request)
        except InvalidArgument as exc:
            self._send(exchange_status(exchange_id, exc))
            return
        task = asyncio.create_task(
            self._run(exchange_id, request.submit, dict(request.trace_context)),
            name=f"job-link-exchange-{exchange_id}",
        )
        self._exchanges[exchange_id] = task
        task.add_done_callback(lambda done: self._ended(exchange_id, done))

    def _ended(self, exchange_id: int, task: asyncio.Task[None]) -> None:
        if self._exchanges.get(exchange_id) is task:
            del self._exchanges[exchange_id]
        self._stirred.set()

    async def _run(
        self,
        exchange_id: int,
        submit: scheduler_pb2.SubmitRequest,
        trace_context: dict[str, str],
    ) -> None:
        with _tracer.start_as_current_span(
            JOB_LINK_EXCHANGE_SPAN,
            context=context_from(trace_context),
            kind=SpanKind.SERVER,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                carrier = request_trace_carrier(trace_context)
                async for event in self._follow(submit, carrier):
                    self._send(scheduler_pb2.JobLinkEvent(exchange_id=exchange_id, event=event))
            except MeshError as exc:
                if is_server_fault(exc.code):
                    span.set_status(Status(StatusCode.ERROR, exc.message))
                self._send(exchange_status(exchange_id, exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("JobLink exchange %d failed", exchange_id)
                span.set_status(Status(StatusCode.ERROR, repr(exc)))
                self._send(
                    exchange_status(
                        exchange_id, MeshError("internal error; see the scheduler's log")
                    )
                )
