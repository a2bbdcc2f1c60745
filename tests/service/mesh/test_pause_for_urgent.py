"""A REALTIME job arriving while the only worker runs a long BATCH batch pauses that batch at
its next step boundary instead of waiting for it to end; the paused jobs end unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2
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
