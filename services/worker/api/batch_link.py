"""BatchLink: the scheduler's batches for this worker over one long-lived stream.

A RunBatch call per batch cost both ends gRPC's per-call set-up and tear-down
(`bench.grpc_hops`: about half a millisecond of CPU on each side, and 0.7 ms of latency, at
one request at a time); on this worker that CPU is taken on the event loop's thread, whose
GIL the device thread needs for a small model's Python. Over one stream a batch costs a
message each way, and a message carries whatever was waiting when it was sent.

Each batch runs as its own task and ends alone: refused, run to its end, failed, or stopped by
the scheduler. The stream ends when the scheduler closes its side and the batches still
open have ended, or when the worker stops (see `BatchLinks`); the scheduler going away stops
every open batch at its next step, as a cancelled call did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from opentelemetry.trace import SpanKind, Status, StatusCode

from mediamesh.common.api import worker_wire
from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.api.multiplexed import OpenStreams, ServedStream, serve_stream
from mediamesh.common.api.status import to_number
from mediamesh.common.errors import InvalidArgument, MeshError, Unavailable
from mediamesh.common.errors import StatusCode as Code
from mediamesh.common.generated.v1 import worker_pb2
from mediamesh.common.telemetry import (
    BATCH_LINK_BATCH_SPAN,
    context_from,
    is_server_fault,
    request_trace_carrier,
    tracer,
)
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.worker.api.batch_checks import check_run

log = logging.getLogger(__name__)

_tracer = tracer(__name__)


class BatchRunner(Protocol):
    """What runs a batch here (the worker's runtime)."""

    def run_batch_groups(
        self,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        *,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[WorkerEvent]]:
        """The batch's events, in the groups the device thread handed them over in."""
        ...


class BatchLinks(OpenStreams["_Link"]):
    """A worker's open BatchLink streams, closed together when it stops (OpenStreams)."""


async def serve_batch_link(
    requests: AsyncIterator[worker_pb2.BatchLinkRequests],
    runner: BatchRunner,
    links: BatchLinks,
) -> AsyncIterator[worker_pb2.BatchLinkEvents]:
    """The stream's answers to `requests`, each batch run by `runner`; kept in `links`."""
    async for events in serve_stream(_Link(runner), requests, links, "batch-link"):
        yield events


def batch_end(batch_id: str, error: MeshError | None = None) -> worker_pb2.BatchLinkEvent:
    """The message ending a batch: OK, or `error`'s status."""
    end = worker_pb2.BatchEnd()
    if error is not None:
        end = worker_pb2.BatchEnd(code=to_number(error.code), message=error.message)
    return worker_pb2.BatchLinkEvent(batch_id=batch_id, end=end)


class _Link(ServedStream[worker_pb2.BatchLinkEvent]):
    """One stream's open batches and the messages waiting to be sent."""

    def __init__(self, runner: BatchRunner) -> None:
        super().__init__(lambda pack: worker_pb2.BatchLinkEvents(events=pack))
        self._runner = runner
        self._batches: dict[str, asyncio.Task[None]] = {}

    def stop_all(self) -> None:
        for task in self._batches.values():
            task.cancel()
        self._batches.clear()

    def _has_open(self) -> bool:
        return bool(self._batches)

    def _take(self, request: worker_pb2.BatchLinkRequest) -> None:
        action = request.WhichOneof("action")
        if action == "stop":
            stopped = self._batches.pop(request.stop, None)
            if stopped is not None:
                stopped.cancel()
            return
        if action != "run":
            return  # nothing asked (an empty request): nothing to answer, nobody to tell
        batch_id = request.run.batch_id
        if batch_id in self._batches:
            refusal = InvalidArgument(f"run.batch_id: {batch_id!r} is already open here")
            self._send(batch_end(batch_id, refusal))
            return
        if self._closing:
            self._send(batch_end(batch_id, Unavailable("the worker is stopping; retry")))
            return
        try:
            check_bounds(request)
            check_run(request.run, "run.")
        except InvalidArgument as exc:
            self._send(batch_end(batch_id, exc))
            return
        task = asyncio.create_task(
            self._run(request.run, dict(request.trace_context)), name=f"batch-{batch_id}"
        )
        self._batches[batch_id] = task
        task.add_done_callback(lambda done: self._ended(batch_id, done))

    def _ended(self, batch_id: str, task: asyncio.Task[None]) -> None:
        if self._batches.get(batch_id) is task:
            del self._batches[batch_id]
        self._outbox.stirred.set()

    async def _run(self, run: worker_pb2.RunBatchRequest, trace_context: dict[str, str]) -> None:
        batch_id = run.batch_id
        with _tracer.start_as_current_span(
            BATCH_LINK_BATCH_SPAN,
            context=context_from(trace_context),
            kind=SpanKind.SERVER,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                jobs = [worker_wire.job_params(spec) for spec in run.jobs]
                self._send(worker_pb2.BatchLinkEvent(batch_id=batch_id, accepted=True))
                groups = self._runner.run_batch_groups(
                    batch_id,
                    run.model,
                    jobs,
                    run.pause_batch_id,
                    trace_carrier=request_trace_carrier(trace_context),
                )
                async for group in groups:
                    for message in worker_wire.batch_events(group):
                        self._send(worker_pb2.BatchLinkEvent(batch_id=batch_id, event=message))
                self._send(batch_end(batch_id))
            except MeshError as exc:
                if is_server_fault(exc.code):
                    span.set_status(Status(StatusCode.ERROR, exc.message))
                self._send(batch_end(batch_id, exc))
            except Exception as exc:
                log.exception("batch %s failed on its BatchLink stream", batch_id)
                span.set_status(Status(StatusCode.ERROR, repr(exc)))
                failure = MeshError("internal error; see the service log", code=Code.INTERNAL)
                self._send(batch_end(batch_id, failure))
