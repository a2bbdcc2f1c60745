"""A worker whose internal credential the scheduler refuses says so in its log, once a
minute rather than at every retry, and keeps retrying until the credential is right."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import InternalAuthSettings, MeshConfig, WorkerSettings
from mediamesh.worker.main import start_worker
from tests.service.conftest import start_mesh, stop_mesh


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "mediamesh.worker" and r.levelno == logging.ERROR
    ]


async def test_a_refused_worker_token_is_logged_and_retried(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    mesh = await start_mesh(tmp_path, models_dir, [], token="right-token")
    address = f"127.0.0.1:{mesh.scheduler.port}"
    wrong = mesh.config.model_copy(
        update={"internal_auth": InternalAuthSettings(token="wrong-token")}
    )
    settings = WorkerSettings(
        worker_id="w-wrong",
        port=0,
        metrics_port=None,
        scheduler_address=address,
        models=["echo"],
        checkpoint_dir=tmp_path / "checkpoints",
    )
    worker = await start_worker(wrong, load_registry(), settings)
    try:
        for _ in range(100):
            if refusals(caplog):
                break
            await asyncio.sleep(0.05)
        # Backoff 0.2, 0.4, 0.8 s: several refused attempts in this time, one line.
        await asyncio.sleep(2.0)
        lines = refusals(caplog)
        assert len(lines) == 1, lines
        assert address in lines[0] and "UNAUTHENTICATED" in lines[0]
        assert "internal_auth" in lines[0] and "internal_tls" in lines[0]
        assert not mesh.core.units

        # The operator fixes the secret: the next attempt registers, with no restart.
        worker.session.credentials = InternalCredentials(token="right-token")
        await asyncio.wait_for(worker.session.registered.wait(), 15)
        assert set(mesh.core.units) == {"w-wrong"}
    finally:
        await worker.stop()
        await stop_mesh(mesh)


async def test_a_worker_that_cannot_reach_the_scheduler_says_so_once(
    tmp_path: Path, models_dir: Path, unused_tcp_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    address = f"127.0.0.1:{unused_tcp_port}"
    settings = WorkerSettings(
        worker_id="w-alone",
        port=0,
        metrics_port=None,
        scheduler_address=address,
        models=["echo"],
        checkpoint_dir=tmp_path / "checkpoints",
    )
    config = MeshConfig(models_dir=models_dir, workers=[])
    worker = await start_worker(config, load_registry(), settings)
    try:
        await asyncio.sleep(2.0)  # several attempts
        lines = [
            r.getMessage()
            for r in caplog.records
            if r.name == "mediamesh.worker" and "cannot attach" in r.getMessage()
        ]
        assert len(lines) == 1, lines
        assert address in lines[0] and "internal_tls" in lines[0]
    finally:
        await worker.stop()
