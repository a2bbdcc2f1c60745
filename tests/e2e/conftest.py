"""`mediamesh up` as a real process tree on loopback, with free ports and a time limit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml

from bench.launcher import free_port
from tests.conftest import ROOT

READY_TIMEOUT_S = 240


@dataclass
class MeshProcess:
    process: subprocess.Popen
    config_path: Path
    config: dict
    run_dir: Path
    output: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        g = self.config["gateway"]
        return f"127.0.0.1:{g['port']}"

    @property
    def scheduler(self) -> str:
        return f"127.0.0.1:{self.config['scheduler']['port']}"

    def ports(self) -> list[int]:
        ports = [self.config["gateway"]["port"], self.config["scheduler"]["port"]]
        ports += [w["port"] for w in self.config["workers"]]
        ports += [self.config["gateway"]["metrics_port"], self.config["scheduler"]["metrics_port"]]
        ports += [self.config["gateway"]["http_port"]]
        ports += [w["metrics_port"] for w in self.config["workers"]]
        return ports

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def child_pid(self, name_fragment: str) -> int:
        for child in self.children():
            if name_fragment in " ".join(child.cmdline()):
                return child.pid
        raise LookupError(name_fragment)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mediamesh.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    def log(self, name: str) -> str:
        path = self.run_dir / f"{name}.log"
        return path.read_text() if path.exists() else ""


def mesh_config(tmp: Path, models_dir: Path, workers: list[dict], **sections: object) -> dict:
    config: dict = {
        "models_dir": str(models_dir),
        "internal_auth": {"token": "e2e-internal-token"},
        "gateway": {"port": free_port(), "metrics_port": free_port(), "http_port": free_port()},
        "scheduler": {
            "port": free_port(),
            "metrics_port": free_port(),
            "store_path": str(tmp / "state" / "jobs.sqlite3"),
            "artifact_dir": str(tmp / "artifacts"),
            "heartbeat_interval_s": 0.5,
            # Tests that batch concurrent submissions need the window even on an idle mesh.
            "batch_window_when_idle": True,
        },
        "workers": [],
    }
    for key, value in sections.items():
        if isinstance(value, dict):
            config.setdefault(key, {}).update(value)
        else:
            config[key] = value
    for index, worker in enumerate(workers):
        entry = {
            "worker_id": f"worker-{index}",
            "port": free_port(),
            "metrics_port": free_port(),
            "torch_threads": 1,
            "checkpoint_dir": str(tmp / "artifacts" / "checkpoints"),
            "drain_grace_s": 20,
        }
        entry.update(worker)
        entry["scheduler_address"] = f"127.0.0.1:{config['scheduler']['port']}"
        config["workers"].append(entry)
    config["gateway"]["scheduler_address"] = f"127.0.0.1:{config['scheduler']['port']}"
    return config


def start(tmp: Path, config: dict, extra_args: tuple[str, ...] = ()) -> MeshProcess:
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mediamesh.cli.main",
            "up",
            "--config",
            str(path),
            "--run-dir",
            str(run_dir),
            "--no-build",
            *extra_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    mesh = MeshProcess(process, path, config, run_dir)
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            mesh.output.append(line)
            if line.startswith("mediamesh ready:"):
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(READY_TIMEOUT_S):
        stop(mesh)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in run_dir.glob("*.log"))
        raise AssertionError(f"mesh not ready: {''.join(mesh.output)}\n{logs}")
    return mesh


def port_bound(port: int) -> bool:
    """Whether something still holds the port, as a restarted mesh would find it. With
    SO_REUSEADDR, as the servers bind: a connection the server closed first lingers in
    TIME_WAIT for a minute, which blocks a plain bind but is no leftover process."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def stop(mesh: MeshProcess) -> None:
    """Ctrl-C, as a user would; then everything must be gone, kill what is not."""
    children = mesh.children()
    if mesh.process.poll() is None:
        mesh.process.send_signal(signal.SIGINT)
        try:
            mesh.process.wait(60)
        except subprocess.TimeoutExpired:
            mesh.process.kill()
    _gone, alive = psutil.wait_procs(children, timeout=10)
    for proc in alive:
        proc.kill()
    assert not alive, f"left running after stop: {[p.pid for p in alive]}"


@pytest.fixture
def launch(tmp_path: Path, models_dir: Path) -> Iterator[Callable[..., MeshProcess]]:
    started: list[MeshProcess] = []

    def _launch(
        workers: list[dict], extra_args: tuple[str, ...] = (), **sections: object
    ) -> MeshProcess:
        mesh = start(tmp_path, mesh_config(tmp_path, models_dir, workers, **sections), extra_args)
        started.append(mesh)
        return mesh

    yield _launch
    for mesh in started:
        stop(mesh)


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError("condition not met in time")
