"""A REALTIME job arriving while the only worker runs a long BATCH batch pauses that batch at
its next step boundary instead of waiting for it to end; the paused jobs end unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.scheduler.core.jobs import Priority
from tests.service.conftest import start_mesh, stop_mesh

BULK_STEPS = 50
# 50 steps of flux-tiny at 128x128 take the cost model's prior ~3 s for the pair: past this SLA, so
# a REALTIME job arriving a few steps in would miss it by waiting.
SCHEDULER = {
    "queues": {"image": {"sla_s": 1.0}},
    "placement": {"BATCH": {"prefer": "on-demand"}},
}


async def collect(stream: AsyncIterator[common_pb2.GenerateEvent]) -> list:
    return [event async for event in stream]


def bulk_requests() -> list[common_pb2.GenerateRequest]:
    return [
        common_pb2.GenerateRequest(
            model="flux-tiny",
            prompt="a lighthouse",
            steps=BULK_STEPS,
            width=128,
            height=128,
            seed=seed,
            priority=common_pb2.BATCH,
        )
        for seed in (1, 2)
    ]


def pauses(priority: str) -> float:
    return REGISTRY.get_sample_value("mediamesh_pauses_total", {"priority": priority}) or 0.0


async def test_realtime_job_pauses_a_long_batch_batch_which_then_ends_unchanged(
    tmp_path, models_dir
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], scheduler=SCHEDULER)
    try:
        stub = mesh.gateway_stub()
        paused_before = pauses("BATCH")
        bulk = [asyncio.create_task(collect(stub.Generate(r))) for r in bulk_requests()]
        core = mesh.core

        def bulk_jobs() -> list:
            return [j for j in core.jobs.values() if j.priority is Priority.BATCH]

        for _ in range(1500):
            jobs = bulk_jobs()
            if len(jobs) == 2 and all(j.step >= 3 for j in jobs):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the BATCH batch did not get going")
        urgent = common_pb2.GenerateRequest(
            model="flux-tiny", prompt="now", steps=4, width=64, height=64, seed=9
        )
        urgent.priority = common_pb2.REALTIME
        urgent_events = await asyncio.wait_for(collect(stub.Generate(urgent)), 60)
        assert urgent_events[-1].HasField("result")
        # Done while the BATCH jobs were far from their end: it waited a step, not a batch.
        assert all(j.step <= BULK_STEPS - 10 for j in bulk_jobs())

        bulk_events = await asyncio.wait_for(asyncio.gather(*bulk), 120)
        for events in bulk_events:
            assert events[-1].HasField("result")
            notices = [e.notice.kind for e in events if e.HasField("notice")]
            assert notices.count("paused") == 1 and notices.count("resumed") == 1
            # The worker's notices name the run they belong to, as the scheduler's do.
            for event in events:
                if event.HasField("notice") and event.notice.kind in ("paused", "resumed"):
                    assert event.notice.worker_id and event.notice.attempt == 1, event
        assert pauses("BATCH") - paused_before == 2
        assert core.pauses[Priority.REALTIME] == 1

        # The same batch again, with nothing to pause it: the same bytes.
        again = await asyncio.wait_for(
            asyncio.gather(*(collect(stub.Generate(r)) for r in bulk_requests())), 120
        )
        for paused_run, quiet_run in zip(bulk_events, again, strict=True):
            quiet_notices = [e.notice.kind for e in quiet_run if e.HasField("notice")]
            assert "paused" not in quiet_notices
            assert paused_run[-1].result.data == quiet_run[-1].result.data
    finally:
        await stop_mesh(mesh)


async def test_a_paused_job_reads_paused_in_get_job_and_apart_from_running_in_status(
    tmp_path, models_dir
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], scheduler=SCHEDULER)
    try:
        stub = mesh.gateway_stub()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
        mesh.channels.append(channel)
        scheduler = scheduler_pb2_grpc.SchedulerStub(channel)
        bulk = [asyncio.create_task(collect(stub.Generate(r))) for r in bulk_requests()]
        core = mesh.core
        for _ in range(1500):
            jobs = [j for j in core.jobs.values() if j.priority is Priority.BATCH]
            if len(jobs) == 2 and all(j.step >= 3 for j in jobs):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the BATCH batch did not get going")
        watched = jobs[0]
        # Long enough (about a second) to be seen running while the BATCH batch waits.
        urgent = common_pb2.GenerateRequest(
            model="flux-tiny", prompt="now", steps=50, width=256, height=256, seed=9
        )
        urgent.priority = common_pb2.REALTIME
        urgent_run = asyncio.create_task(collect(stub.Generate(urgent)))
        seen: tuple[common_pb2.JobInfo, scheduler_pb2.MeshStatus] | None = None
        first_watched: list[common_pb2.GenerateEvent] = []
        while seen is None and not urgent_run.done():
            # A job pauses at most once here (pause_max_per_job 1): paused before and after
            # the calls means paused while they were answered.
            before = core.is_paused(watched)
            info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=watched.job_id))
            status = await scheduler.GetStatus(scheduler_pb2.GetStatusRequest())
            watch = stub.Watch(gateway_pb2.WatchRequest(job_id=watched.job_id))
            events = [await watch.read(), await watch.read()]
            watch.cancel()
            if before and core.is_paused(watched):
                seen = (info, status)
                first_watched = events
            await asyncio.sleep(0.005)
        assert seen is not None, "the BATCH batch was never seen paused"
        info, status = seen
        # A watcher that comes during the pause is told so after the job's state, rather
        # than seeing a RUNNING job that does not move and then an unexplained `resumed`.
        progress, notice = first_watched
        assert progress.HasField("progress"), progress
        assert notice.notice.kind == "paused" and notice.notice.attempt == 1, notice
        assert info.state == common_pb2.RUNNING and info.paused
        [image] = [q for q in status.queues if q.name == "image"]
        # Three jobs hold the worker, one of them computing.
        assert (image.running, image.paused) == (1, 2)

        await asyncio.wait_for(urgent_run, 60)
        await asyncio.wait_for(asyncio.gather(*bulk), 120)
        info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=watched.job_id))
        assert info.state == common_pb2.SUCCEEDED and not info.paused
        status = await scheduler.GetStatus(scheduler_pb2.GetStatusRequest())
        [image] = [q for q in status.queues if q.name == "image"]
        assert (image.running, image.paused) == (0, 0)
    finally:
        await stop_mesh(mesh)
