"""An open-loop client for e2e measurements: jobs start at planned times whatever the mesh
answers, and each job's event stream is timed as it arrives."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc

# States that say the job has left the queue (the event may be a notice or a progress event).
_STARTED = (common_pb2.DISPATCHED, common_pb2.RUNNING)


@dataclass(frozen=True)
class PlannedJob:
    # Seconds after the plan starts.
    at_s: float
    model: str
    params: dict[str, int | float]


@dataclass
class JobTiming:
    """Wall-clock times (time.time(), comparable with the mesh's spans) seen by the client."""

    model: str
    submitted: float
    job_id: str = ""
    # First event saying the job left the queue; None if the stream never said so.
    started: float | None = None
    finished: float | None = None
    outcome: str = ""


async def _follow(stub: gateway_pb2_grpc.GatewayStub, job: PlannedJob, index: int) -> JobTiming:
    request = common_pb2.GenerateRequest(
        model=job.model,
        prompt=f"validation {index}",
        seed=index,
        priority=common_pb2.STANDARD,
    )
    for name, value in job.params.items():
        setattr(request, name, value)
    timing = JobTiming(job.model, time.time())
    try:
        # No gRPC timeout: the gateway would make it the job's deadline, and the scheduler
        # orders equal classes earliest deadline first; grpc-timeout is sent rounded (to
        # the second at 120 s), so equal timeouts would reorder jobs by up to a second.
        async for event in stub.Generate(request):
            now = time.time()
            timing.job_id = event.job_id
            if timing.started is None and (
                event.state in _STARTED or event.WhichOneof("event") == "progress"
            ):
                timing.started = now
            if event.WhichOneof("event") in ("result", "error"):
                timing.finished = now
                timing.outcome = common_pb2.JobState.Name(event.state)
    except grpc.aio.AioRpcError as exc:
        timing.outcome = exc.code().name
    return timing


async def run_open_loop(
    gateway: str, plan: list[PlannedJob], limit_s: float = 120.0
) -> list[JobTiming]:
    """Start every planned job at its time on one channel; wait for all of them to end, at
    most `limit_s` after the last one started."""
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        start = time.monotonic()

        async def at_time(index: int, job: PlannedJob) -> JobTiming:
            await asyncio.sleep(max(start + job.at_s - time.monotonic(), 0.0))
            return await _follow(stub, job, index)

        everything = asyncio.gather(*(at_time(i, j) for i, j in enumerate(plan)))
        last_start = max((job.at_s for job in plan), default=0.0)
        return list(await asyncio.wait_for(everything, last_start + limit_s))
