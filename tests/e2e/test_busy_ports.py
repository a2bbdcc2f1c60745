"""A port that is already taken stops a service, or `mediamesh up`, with one line naming the
setting and the address."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.launcher import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

SERVICE_TIMEOUT_S = 90


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on for the test's length."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def _sections(tmp: Path, host: str = "127.0.0.1") -> dict[str, dict[str, object]]:
    """Every service's section with free ports, its state under `tmp`, no worker in `workers`
    (`mediamesh worker` then runs the `worker` section)."""
    scheduler_port = free_port()
    return {
        "gateway": {
            "host": host,
            "port": free_port(),
            "http_port": free_port(),
            "metrics_port": free_port(),
            "scheduler_address": f"127.0.0.1:{scheduler_port}",
        },
        "scheduler": {
            "host": host,
            "port": scheduler_port,
            "metrics_port": free_port(),
            "store_path": str(tmp / "jobs.sqlite3"),
            "artifact_dir": str(tmp / "artifacts"),
        },
        "worker": {
            "host": host,
            "port": free_port(),
            "metrics_port": free_port(),
            "models": ["echo"],
            "checkpoint_dir": str(tmp / "checkpoints"),
            # Nothing listens there: the worker only has to start.
            "scheduler_address": f"127.0.0.1:{free_port()}",
        },
    }


def _write_config(tmp: Path, sections: dict[str, dict[str, object]]) -> Path:
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump({**sections, "workers": []}))
    return path


def _env() -> dict[str, str]:
    """This environment without MEDIAMESH_* variables, which would override the config."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("MEDIAMESH_")}


def _run_service(service: str, config: Path) -> subprocess.CompletedProcess[str]:
    """`mediamesh <service>` until it exits (killed at the time limit)."""
    return subprocess.run(
        [sys.executable, "-m", "mediamesh.cli.main", service, "--config", str(config)],
        capture_output=True, text=True, timeout=SERVICE_TIMEOUT_S, cwd=ROOT, env=_env(),
    )  # fmt: skip


def _the_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one `mediamesh:` line of a start that failed cleanly: no traceback, status 2."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("mediamesh:")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize(
    ("service", "setting"),
    [
        ("gateway", "metrics_port"),
        ("gateway", "port"),
        ("scheduler", "metrics_port"),
        ("scheduler", "port"),
        ("scheduler", "health_port"),
        ("worker", "metrics_port"),
        ("worker", "port"),
    ],
)
def test_a_busy_port_stops_the_service_with_one_line_naming_the_setting(
    tmp_path: Path, busy_port: int, service: str, setting: str
) -> None:
    sections = _sections(tmp_path)
    sections[service][setting] = busy_port
    line = _the_error_line(_run_service(service, _write_config(tmp_path, sections)))
    assert line == (
        f"mediamesh: {service}.{setting}: cannot listen on 127.0.0.1:{busy_port}: "
        "address already in use"
    )


def test_up_names_why_a_child_exited_during_start_up(tmp_path: Path, busy_port: int) -> None:
    """As when a second `mediamesh up` finds the first one's ports taken."""
    sections = _sections(tmp_path)
    sections["scheduler"]["port"] = busy_port
    sections["gateway"]["scheduler_address"] = f"127.0.0.1:{busy_port}"
    del sections["worker"]
    config = _write_config(tmp_path, sections)
    run_dir = tmp_path / "run2"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "mediamesh.cli.main", "up", "--config", str(config)),
            *("--run-dir", str(run_dir), "--no-build", "--ready-timeout", "60"),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        _stdout, stderr = process.communicate(timeout=SERVICE_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children that outlived it, if any
        process.wait(10)
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    log = run_dir / "scheduler.log"
    assert (
        f"mediamesh: scheduler exited during start-up: scheduler.port: cannot listen on "
        f"127.0.0.1:{busy_port}: address already in use (log: {log})"
    ) in stderr.splitlines(), stderr
