"""JobLink: a gateway's SubmitAndWatch exchanges over one long-lived stream.

A call per job costs both ends gRPC's per-call set-up and tear-down (`bench.grpc_hops`: about
a quarter of a millisecond of CPU on each side under load, and a third of a millisecond of
latency). Over one stream an exchange costs a message each way, and a message carries
whatever was waiting when it was sent, so under load one message serves several jobs.

Each exchange runs as its own task and ends alone: its submit refused, its job followed to
the final event, or stopped by the gateway (cancelling its job, when asked, even one whose id
the gateway has not been told yet). The stream ends when the gateway closes its side
and the exchanges still open have ended, or when the gateway goes away (the jobs run on; only
their followers stop, as when a call per job is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from opentelemetry.trace import SpanKind, Status, StatusCode

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.api.multiplexed import OpenStreams, ServedStream, serve_stream
from mediamesh.common.api.status import to_number
from mediamesh.common.errors import InvalidArgument, MeshError, Unavailable, retry_after_ms
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
    [scheduler_pb2.SubmitRequest, dict[str, str]], AsyncGenerator[common_pb2.GenerateEvent, None]
]
# Cancels a tenant's job (job id, tenant), as the Cancel rpc does.
CancelJob = Callable[[str, str], Awaitable[object]]

_tracer = tracer(__name__)


class JobLinks(OpenStreams["_Link"]):
    """A scheduler's open JobLink streams, closed together when it stops (OpenStreams)."""


async def serve_job_link(
    requests: AsyncIterator[scheduler_pb2.JobLinkRequests],
    follow: Follow,
    cancel_job: CancelJob,
    links: JobLinks | None = None,
) -> AsyncIterator[scheduler_pb2.JobLinkEvents]:
    """The stream's answers to `requests`, each exchange followed with `follow` (and its job
    cancelled with `cancel_job` when the gateway asks); kept in `links` while open."""
    links = links or JobLinks()
    async for events in serve_stream(_Link(follow, cancel_job), requests, links, "job-link"):
        yield events


def exchange_status(exchange_id: int, error: MeshError) -> scheduler_pb2.JobLinkEvent:
    """The event that ends an exchange with `error`'s status."""
    return scheduler_pb2.JobLinkEvent(
        exchange_id=exchange_id,
        status=scheduler_pb2.ExchangeStatus(
            code=to_number(error.code),
            message=error.message,
            retry_after_ms=retry_after_ms(error.retry_after_s) if error.retry_after_s else 0,
        ),
    )


@dataclass
class _Exchange:
    """An open exchange: the task following its job, and what cancelling the job needs."""

    task: asyncio.Task[None]
    tenant: str
    # Known once the job's first event (its state when queued) has been sent.
    job_id: str = ""
    # The gateway asked to cancel the job: no more events are sent, and the job is
    # cancelled as soon as its id is known.
    unwanted: bool = False


class _Link(ServedStream[scheduler_pb2.JobLinkEvent]):
    """One stream's open exchanges and the events waiting to be sent."""

    def __init__(self, follow: Follow, cancel_job: CancelJob) -> None:
        super().__init__(lambda pack: scheduler_pb2.JobLinkEvents(events=pack))
        self._follow = follow
        self._cancel_job = cancel_job
        self._exchanges: dict[int, _Exchange] = {}

    def stop_all(self) -> None:
        for exchange in self._exchanges.values():
            exchange.task.cancel()
        self._exchanges.clear()

    def _has_open(self) -> bool:
        return bool(self._exchanges)

    def _take(self, request: scheduler_pb2.JobLinkRequest) -> None:
        exchange_id = request.exchange_id
        action = request.WhichOneof("action")
        if action == "stop":
            stopped = self._exchanges.pop(exchange_id, None)
            if stopped is not None:
                stopped.task.cancel()
            return
        if action == "cancel":
            self._cancel(exchange_id)
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
        self._exchanges[exchange_id] = _Exchange(task, request.submit.tenant)
        task.add_done_callback(lambda done: self._ended(exchange_id, done))

    def _cancel(self, exchange_id: int) -> None:
        exchange = self._exchanges.get(exchange_id)
        if exchange is None or exchange.unwanted:
            return  # ended already: its job's end stands
        exchange.unwanted = True
        if exchange.job_id:
            # Following a job that may not move for a while: interrupt, then cancel it.
            exchange.task.cancel()
        # Otherwise the submit is under way: the job is cancelled when its first event names it.

    def _ended(self, exchange_id: int, task: asyncio.Task[None]) -> None:
        exchange = self._exchanges.get(exchange_id)
        if exchange is not None and exchange.task is task:
            del self._exchanges[exchange_id]
        self._outbox.stirred.set()

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
            # Held from the start: a stream that ends clears the link's exchanges.
            exchange = self._exchanges[exchange_id]
            try:
                carrier = request_trace_carrier(trace_context)
                async with contextlib.aclosing(self._follow(submit, carrier)) as events:
                    async for event in events:
                        exchange.job_id = event.job_id
                        if exchange.unwanted:
                            break
                        self._send(scheduler_pb2.JobLinkEvent(exchange_id=exchange_id, event=event))
                if exchange.unwanted:
                    await self._cancel_unwanted(exchange)
            except MeshError as exc:
                if is_server_fault(exc.code):
                    span.set_status(Status(StatusCode.ERROR, exc.message))
                if not exchange.unwanted:
                    self._send(exchange_status(exchange_id, exc))
            except asyncio.CancelledError:
                if exchange.unwanted and exchange.job_id:
                    await self._cancel_unwanted(exchange)
                raise
            except Exception as exc:
                log.exception("JobLink exchange %d failed", exchange_id)
                span.set_status(Status(StatusCode.ERROR, repr(exc)))
                self._send(
                    exchange_status(
                        exchange_id, MeshError("internal error; see the scheduler's log")
                    )
                )

    async def _cancel_unwanted(self, exchange: _Exchange) -> None:
        # Shielded: the stream ending while it runs must not leave the job to run on.
        with contextlib.suppress(MeshError):
            await asyncio.shield(self._cancel_job(exchange.job_id, exchange.tenant))
