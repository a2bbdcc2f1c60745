"""/metrics takes no credential: it listens on loopback unless `metrics_host` says otherwise,
and only once the service passed its fail-closed check."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mediamesh.cli import services
from mediamesh.common import metrics
from mediamesh.common.exposure import InsecureBindError
from mediamesh.common.metrics import serve_metrics
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import (
    GatewaySettings,
    MeshConfig,
    SchedulerSettings,
    WorkerSettings,
)

METRICS_PORT = 48651
HASH = "a" * 64


class MetricsServed(Exception):
    """Stops a start where the metrics listener would open: nothing else gets bound."""


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, int | None]]]:
    calls: list[tuple[str, str, int | None]] = []

    def record(section: str, host: str, port: int | None) -> None:
        calls.append((section, host, port))
        raise MetricsServed

    monkeypatch.setattr(services, "serve_metrics", record)
    # Process-wide state is not this test's business: logging, tracing, and above all the
    # SIGTERM/SIGINT handlers, which uvloop leaves behind on its closed loop (pytest would
    # then ignore both).
    monkeypatch.setattr(services, "setup_logging", lambda *_: None)
    monkeypatch.setattr(services, "setup_tracing", lambda *_: None)
    monkeypatch.setattr(services, "stop_event_on_signals", asyncio.Event)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield calls
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _run(role: str, tmp_path: Path, **section: object) -> Callable[[], object]:
    """`mediamesh <role>`'s entry point for a config whose service section is `section`."""
    section = {"metrics_port": METRICS_PORT, **section}
    registry = load_registry()
    if role == "gateway":
        config = MeshConfig(gateway=GatewaySettings.model_validate(section), workers=[])
        return lambda: services.run_gateway(config, registry)
    if role == "scheduler":
        scheduler = SchedulerSettings.model_validate(
            {"store_path": tmp_path / "jobs.sqlite3", "artifact_dir": tmp_path, **section}
        )
        config = MeshConfig(scheduler=scheduler, workers=[])
        return lambda: services.run_scheduler(config, registry)
    worker = WorkerSettings.model_validate({"allow_downloads": True, **section})
    return lambda: services.run_worker(MeshConfig(workers=[]), registry, worker)


ROLES = ["gateway", "scheduler", "worker"]


@pytest.mark.parametrize("role", ROLES)
def test_a_refused_start_exposes_no_metrics(role: str, tmp_path: Path, served: list):
    # No credential on every interface: the service refuses, and its metrics never listened.
    with pytest.raises(InsecureBindError):
        _run(role, tmp_path, host="0.0.0.0", metrics_host="0.0.0.0")()
    assert served == []


@pytest.mark.parametrize("role", ROLES)
def test_metrics_listen_on_loopback_whatever_the_service_host(
    role: str, tmp_path: Path, served: list
):
    # --insecure passes the check; the service's own host does not carry over to /metrics.
    with pytest.raises(MetricsServed):
        _run(role, tmp_path, host="0.0.0.0", insecure=True)()
    assert served == [(role, "127.0.0.1", METRICS_PORT)]


@pytest.mark.parametrize("role", ROLES)
def test_metrics_host_is_the_operators_choice(role: str, tmp_path: Path, served: list):
    with pytest.raises(MetricsServed):
        _run(role, tmp_path, host="127.0.0.1", metrics_host="0.0.0.0")()
    assert served == [(role, "0.0.0.0", METRICS_PORT)]


def test_a_metrics_host_off_loopback_is_said_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    bound: list[tuple[int, str]] = []
    monkeypatch.setattr(metrics, "start_http_server", lambda port, addr: bound.append((port, addr)))
    with caplog.at_level(logging.INFO, logger="mediamesh.security"):
        serve_metrics("scheduler", "127.0.0.1", METRICS_PORT)
        assert not caplog.records
        serve_metrics("scheduler", "0.0.0.0", METRICS_PORT)
    assert bound == [(METRICS_PORT, "127.0.0.1"), (METRICS_PORT, "0.0.0.0")]
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("scheduler.metrics_host 0.0.0.0 is not loopback: /metrics on")


def test_these_starts_leave_the_signal_handlers_alone(tmp_path: Path, served: list):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(MetricsServed):
        _run("scheduler", tmp_path, insecure=True)()
    assert signal.getsignal(signal.SIGTERM) == before
