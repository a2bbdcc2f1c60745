"""A worker's heartbeats: at the interval the scheduler asks for, and at once when what the
scheduler routes by changes (a drain), but not for every batch that starts and ends."""

from __future__ import annotations

import asyncio
import time

from mediamesh.common.generated.v1 import common_pb2
from tests.service.conftest import start_mesh, stop_mesh

INTERVAL_S = 0.5


async def test_batches_send_no_beats_of_their_own_and_a_drain_goes_at_once(tmp_path, models_dir):
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], scheduler={"heartbeat_interval_s": INTERVAL_S}
    )
    try:
        runtime = mesh.scheduler.runtime
        beats: list[tuple[float, bool]] = []
        heard = runtime.worker_heartbeat

        def counted(worker_id, draining, *args, **kwargs):
            beats.append((time.monotonic(), draining))
            heard(worker_id, draining, *args, **kwargs)

        runtime.worker_heartbeat = counted
        stub = mesh.gateway_stub()
        started = time.monotonic()
        for index in range(30):
            request = common_pb2.GenerateRequest(model="echo", prompt=f"p{index}")
            events = [e async for e in stub.Generate(request)]
            assert events[-1].state == common_pb2.SUCCEEDED
        elapsed = time.monotonic() - started
        # 30 batches, each of which used to wake a beat as it started and as it ended.
        assert len(beats) <= elapsed / INTERVAL_S + 2, (len(beats), elapsed)

        before = len(beats)
        drain_asked = time.monotonic()
        mesh.workers[0].runtime.start_drain()
        for _ in range(100):
            if any(draining for _, draining in beats[before:]):
                break
            await asyncio.sleep(0.01)
        told = next(at for at, draining in beats[before:] if draining)
        assert told - drain_asked < INTERVAL_S / 2
    finally:
        await stop_mesh(mesh)
