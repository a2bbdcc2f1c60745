"""The protocol's readiness probes answer within a probe's usual one-second timeout when the
scheduler does not answer (stopped, or its loop stuck): not ready. They waited 5 s for it,
so a probe with the kubelet's default timeout saw a timeout rather than the answer."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from bench.launcher import free_port
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, MeshConfig, SchedulerSettings
from mediamesh.gateway.main import start_gateway


async def test_ready_answers_not_ready_promptly_when_the_scheduler_is_silent(
    tmp_path: Path,
) -> None:
    # Accepts connections (the kernel's backlog does) and never says a word of HTTP/2.
    silent = socket.create_server(("127.0.0.1", 0))
    config = MeshConfig(
        scheduler=SchedulerSettings(
            port=free_port(),
            metrics_port=None,
            store_path=tmp_path / "jobs.sqlite3",
            artifact_dir=tmp_path / "artifacts",
        ),
        gateway=GatewaySettings(
            port=0,
            metrics_port=None,
            http_port=0,
            scheduler_address=f"127.0.0.1:{silent.getsockname()[1]}",
        ),
        workers=[],
    )
    gateway = await start_gateway(config, load_registry())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http_port}") as client:
            started = time.monotonic()
            answer = await client.get("/v2/health/ready", timeout=10)
            waited = time.monotonic() - started
        assert answer.status_code == 400 and answer.json() == {"ready": False}
        assert waited < 3, f"answered after {waited:.1f} s"
    finally:
        await gateway.stop(0.5)
        silent.close()
