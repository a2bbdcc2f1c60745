"""A worker that finishes a batch takes the next waiting batch at once, not at the dispatch
loop's next tick (found by the simulator validation, tests/e2e/test_sim_validation.py)."""

from __future__ import annotations

import asyncio
import time

from mediamesh.common.generated.v1 import common_pb2
from tests.service.conftest import start_mesh, stop_mesh

# Far longer than the whole test should take, so a missed wakeup cannot hide behind it.
TICK_S = 5.0


async def test_the_next_batch_starts_when_the_previous_one_ends(tmp_path, models_dir):
    mesh = await start_mesh(
        tmp_path, models_dir, [["flux-tiny"]], scheduler={"heartbeat_interval_s": TICK_S}
    )
    try:
        stub = mesh.gateway_stub()

        async def generate(seed: int) -> str:
            request = common_pb2.GenerateRequest(model="flux-tiny", prompt="x", seed=seed)
            async for event in stub.Generate(request, timeout=30):
                if event.WhichOneof("event") in ("result", "error"):
                    return common_pb2.JobState.Name(event.state)
            return "NO_RESULT"

        started = time.monotonic()
        # max_batch is 4: the fifth job waits for the first batch to end, and nothing else
        # happens in the mesh that could wake the dispatch loop for it.
        states = await asyncio.gather(*(generate(seed) for seed in range(5)))
        elapsed = time.monotonic() - started
        assert states == ["SUCCEEDED"] * 5
        assert elapsed < TICK_S / 2, f"the second batch waited for the loop's tick: {elapsed:.2f} s"
    finally:
        await stop_mesh(mesh)
