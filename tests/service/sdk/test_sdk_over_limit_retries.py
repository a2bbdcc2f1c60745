"""Over-limit answers are waited out for as long as a caller keeps to its tenant's rate:
sequential reads retry at the gateway's pushback however many were refused before, and a
burst of concurrent patient submits all get in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mediamesh import AsyncClient, Client
from tests.service.conftest import stop_mesh
from tests.service.gateway.conftest import KEY_A, keyed
from tests.service.sdk.conftest import address_of, sdk_mesh_with

READS_PER_S = 20
SUBMITS_PER_S, SUBMIT_BURST = 20, 5
READS, SUBMITS = 25, 25


async def test_reads_and_submits_over_the_tenant_rate_are_all_waited_out(
    tmp_path: Path, models_dir: Path
) -> None:
    tenant = {
        "reads_per_second": READS_PER_S,
        "read_burst": 1,
        "requests_per_second": SUBMITS_PER_S,
        "burst": SUBMIT_BURST,
    }
    mesh = await sdk_mesh_with(tmp_path, models_dir, **keyed(a=tenant))
    address = address_of(mesh)
    try:
        async with AsyncClient(address, api_key=KEY_A, retry_on_overload=True) as client:
            started = time.monotonic()
            handles = await asyncio.gather(
                *(client.submit("echo", f"burst {i}") for i in range(SUBMITS))
            )
            took = time.monotonic() - started
        assert len({handle.job_id for handle in handles}) == SUBMITS
        # The README's bound for a burst of concurrent submits against a rate.
        assert took <= 1.25 * (SUBMITS - SUBMIT_BURST) / SUBMITS_PER_S + 1

        def read_sequentially() -> float:
            with Client(address, api_key=KEY_A) as reader:
                started = time.monotonic()
                # Each refused get is retried at the pushback: none may fail, the tenth
                # refusal no more than the first.
                for _ in range(READS):
                    assert reader.get(handles[0].job_id).job_id == handles[0].job_id
                return time.monotonic() - started

        # Far more reads than one burst: the gateway paced them, and the SDK kept up.
        assert await asyncio.to_thread(read_sequentially) >= (READS - 1) / READS_PER_S * 0.9
    finally:
        await stop_mesh(mesh)
