"""mediamesh.v1.Worker over gRPC."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable

import grpc

from mediamesh.common.api import worker_wire
from mediamesh.common.api.lenient import add_servicer
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc
from mediamesh.common.telemetry import request_trace_carrier
from mediamesh.worker.api.batch_checks import check_run
from mediamesh.worker.api.batch_link import BatchLinks, serve_batch_link
from mediamesh.worker.runtime import WorkerRuntime


class WorkerServicer(worker_pb2_grpc.WorkerServicer):
    """mediamesh.v1.Worker: runs the scheduler's batches and answers cancel, drain and status.

    `on_drain(grace_s, exit)` is called on every Drain request, after running batches have been
    asked to checkpoint.
    """

    def __init__(self, runtime: WorkerRuntime, on_drain: Callable[[float, bool], None]) -> None:
        self.runtime = runtime
        self._on_drain = on_drain
        # The schedulers' BatchLink streams, which take no new batch once stopping begins.
        self.links = BatchLinks()

    async def RunBatch(
        self,
        request: worker_pb2.RunBatchRequest,
        context: grpc.aio.ServicerContext[worker_pb2.RunBatchRequest, worker_pb2.BatchEvent],
    ) -> AsyncIterator[worker_pb2.BatchEvent]:
        """Runs the batch and streams its events; the initial metadata tells the scheduler the
        batch was accepted."""
        check_run(request)
        jobs = [worker_wire.job_params(spec) for spec in request.jobs]
        await context.send_initial_metadata(((worker_wire.BATCH_ACCEPTED_KEY, "1"),))
        groups = self.runtime.run_batch_groups(
            request.batch_id,
            request.model,
            jobs,
            request.pause_batch_id,
            # The batch's trace (its first job's): the scheduler sends it with the call.
            trace_carrier=request_trace_carrier(dict(context.invocation_metadata() or ())),
        )
        async for group in groups:
            for message in worker_wire.batch_events(group):
                yield message

    async def BatchLink(
        self,
        requests: AsyncIterator[worker_pb2.BatchLinkRequests],
        context: grpc.aio.ServicerContext[worker_pb2.BatchLinkRequests, worker_pb2.BatchLinkEvents],
    ) -> AsyncIterator[worker_pb2.BatchLinkEvents]:
        """Runs the batches sent over the stream, each as RunBatch would, and streams their
        messages tagged with their batch ids."""
        async for events in serve_batch_link(requests, self.runtime, self.links):
            yield events

    async def Cancel(
        self,
        request: worker_pb2.CancelJobsRequest,
        context: grpc.aio.ServicerContext[
            worker_pb2.CancelJobsRequest, worker_pb2.CancelJobsResponse
        ],
    ) -> worker_pb2.CancelJobsResponse:
        """Cancels those of the jobs running here; answers with the ids found."""
        return worker_pb2.CancelJobsResponse(cancelled=self.runtime.cancel(list(request.job_ids)))

    async def Drain(
        self,
        request: worker_pb2.DrainRequest,
        context: grpc.aio.ServicerContext[worker_pb2.DrainRequest, worker_pb2.DrainResponse],
    ) -> worker_pb2.DrainResponse:
        """Stops taking batches and asks running ones to checkpoint; answers with their job ids.

        With a grace period and no exit, the answer waits until the batches have ended or the
        grace period is over.
        """
        # Checked before anything stops: a bad request must leave the worker serving.
        grace_s = request.grace_s
        if not math.isfinite(grace_s) or grace_s < 0:
            raise InvalidArgument(
                f"grace_s: {grace_s} is out of range: a finite number of seconds >= 0 "
                "(0: the worker's drain_grace_s)"
            )
        preempting = self.runtime.start_drain()
        self._on_drain(request.grace_s, request.exit)
        if request.grace_s > 0 and not request.exit:
            await self.runtime.wait_drained(request.grace_s)
        await asyncio.sleep(0)
        return worker_pb2.DrainResponse(preempted=preempting)

    async def Status(
        self,
        request: worker_pb2.WorkerStatusRequest,
        context: grpc.aio.ServicerContext[
            worker_pb2.WorkerStatusRequest, worker_pb2.WorkerStatusResponse
        ],
    ) -> worker_pb2.WorkerStatusResponse:
        """The worker's id, pool, models, running jobs and whether it is draining."""
        return worker_pb2.WorkerStatusResponse(
            worker_id=self.runtime.worker_id,
            pool=self.runtime.pool,
            models=sorted(self.runtime.hosts),
            running_jobs=self.runtime.running_jobs,
            draining=self.runtime.draining,
        )


_SERVICE = worker_pb2.DESCRIPTOR.services_by_name["Worker"]


def service_names() -> tuple[str, ...]:
    """The full names of the gRPC services a worker serves (reported in its health service)."""
    return (_SERVICE.full_name,)


def adder(servicer: WorkerServicer) -> Callable[[grpc.aio.Server], None]:
    """The server hook that registers `servicer` as mediamesh.v1.Worker."""
    # A BatchLink message holds several batches: one past a limit fails alone.
    return lambda server: add_servicer(
        server, servicer, _SERVICE, bounds_checked_by_servicer=frozenset({"BatchLink"})
    )
