"""Without a credential the scheduler and workers serve only loopback, unless --insecure: an
open scheduler off loopback let anyone Watch or Cancel any job and Attach a rogue worker."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bench.launcher import free_port
from mediamesh.common.exposure import InsecureBindError
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig, SchedulerSettings, WorkerSettings
from mediamesh.scheduler.main import start_scheduler
from mediamesh.worker.main import start_worker
from tests.conftest import ROOT
from tests.service.pki import make_pki


def _open_config(tmp_path: Path, scheduler_port: int = 0) -> Path:
    """Scheduler and worker on every interface, with no internal credential at all."""
    path = tmp_path / "mesh.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "scheduler": {
                    "host": "0.0.0.0",
                    "port": scheduler_port,
                    "metrics_port": None,
                    "store_path": str(tmp_path / "jobs.sqlite3"),
                    "artifact_dir": str(tmp_path / "artifacts"),
                },
                "worker": {
                    "host": "0.0.0.0",
                    "port": 0,
                    "metrics_port": None,
                    "models": ["echo"],
                    "checkpoint_dir": str(tmp_path / "checkpoints"),
                },
                "workers": [],
            }
        )
    )
    return path


def _mediamesh(*args: str) -> list[str]:
    return [sys.executable, "-m", "mediamesh.cli.main", *args]


@pytest.mark.parametrize("service", ["scheduler", "worker"])
def test_without_a_credential_off_loopback_the_command_refuses_in_one_line(
    tmp_path: Path, service: str
):
    config = _open_config(tmp_path)
    result = subprocess.run(
        _mediamesh(service, "--config", str(config)),
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mediamesh: {service}.host 0.0.0.0 is not loopback")
    assert "no internal credential" in lines[0] and "--insecure" in lines[0]


def test_a_workers_entry_off_loopback_is_named_as_its_entry(tmp_path: Path) -> None:
    config = _open_config(tmp_path)
    settings = yaml.safe_load(config.read_text())
    entry = {**settings.pop("worker"), "worker_id": "w1"}
    settings["workers"] = [{**entry, "worker_id": "w0", "host": "127.0.0.1"}, entry]
    config.write_text(yaml.safe_dump(settings))
    result = subprocess.run(
        _mediamesh("worker", "--config", str(config), "--worker-id", "w1"),
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("mediamesh: workers[1].host 0.0.0.0 is not loopback")


def test_the_scheduler_command_with_insecure_serves_off_loopback_and_says_so(tmp_path: Path):
    config = _open_config(tmp_path, scheduler_port=free_port())
    process = subprocess.Popen(
        _mediamesh("scheduler", "--config", str(config), "--insecure"),
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert process.stderr is not None
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "scheduler serving on 0.0.0.0" in line:
                break
        assert any("scheduler serving on 0.0.0.0" in line for line in lines), lines
        (warning,) = [line for line in lines if "INSECURE" in line]
        assert "WARNING" in warning and "accepts EVERY caller" in warning
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _config(tmp_path: Path, credential: str, host: str) -> MeshConfig:
    internal: dict = {}
    if credential == "token":
        internal["internal_auth"] = {"token": "a-token"}
    elif credential == "mtls":
        internal["internal_tls"] = make_pki(tmp_path / "pki").internal_tls()
    return MeshConfig(
        scheduler=SchedulerSettings(
            host=host,
            port=0,
            metrics_port=None,
            store_path=tmp_path / "jobs.sqlite3",
            artifact_dir=tmp_path / "artifacts",
            insecure=credential == "insecure",
        ),
        workers=[],
        **internal,
    )


@pytest.mark.parametrize(
    ("credential", "host", "starts"),
    [
        ("none", "0.0.0.0", False),
        ("insecure", "0.0.0.0", True),
        ("token", "0.0.0.0", True),
        ("mtls", "0.0.0.0", True),
        ("none", "127.0.0.1", True),
    ],
)
async def test_scheduler_and_worker_start_open_only_on_loopback_or_when_insecure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, credential: str, host: str, starts: bool
):
    config = _config(tmp_path, credential, host)
    worker = WorkerSettings(
        worker_id="w",
        host=host,
        port=0,
        metrics_port=None,
        # Nothing listens there: the worker only has to start, not register.
        scheduler_address=f"127.0.0.1:{free_port()}",
        models=["echo"],
        checkpoint_dir=tmp_path / "checkpoints",
        insecure=credential == "insecure",
    )
    registry = load_registry()
    caplog.set_level(logging.WARNING, logger="mediamesh.security")
    if not starts:
        with pytest.raises(InsecureBindError, match=r"not loopback.*--insecure"):
            await start_scheduler(config, registry)
        with pytest.raises(InsecureBindError, match=r"not loopback.*--insecure"):
            await start_worker(config, registry, worker)
        return
    scheduler = await start_scheduler(config, registry)
    try:
        started = await start_worker(config, registry, worker)
        await started.stop()
    finally:
        await scheduler.stop(0)
    loud = [r for r in caplog.records if "INSECURE" in r.getMessage()]
    if credential == "insecure":
        assert {r.getMessage().split()[2] for r in loud} == {"scheduler", "worker"}
        assert all(r.levelno == logging.WARNING for r in loud)
    else:
        assert not loud
