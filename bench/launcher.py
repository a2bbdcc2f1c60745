"""`mediamesh up` as a child process on free loopback ports, stopped with Ctrl-C like a user.

Each benchmark gets its own mesh in a fresh directory, so no job, artifact or calibrated
cost model carries over from one benchmark to the next.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.common import ROOT, log

MODELS_DIR = Path(os.environ.get("MEDIAMESH_MODELS_DIR", ROOT / ".mediamesh" / "models"))
READY_TIMEOUT_S = 300.0
# Where each benchmark mesh keeps its store and artifacts (removed after the run).
RUNS_DIR = ROOT / ".mediamesh" / "bench-runs"
# Quotas far above any load a benchmark offers: we measure the mesh, not the rate limiter.
UNLIMITED_TENANT = {
    "max_concurrent_jobs": 100_000,
    "max_queued_jobs": 100_000,
    "requests_per_second": 1_000_000.0,
    "burst": 1_000_000,
}


def _below_ephemeral_range() -> range:
    """Ports the kernel never picks as the source port of an outgoing connection."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(low - 12000, 1024), low)


def _own_share(ports: range) -> range:
    """This process's share of `ports` when pytest-xdist runs the tests in several processes.

    Each process walks its ports from a start of its own, but xdist's processes start at
    nearly the same pid, so their walks overlapped: one found a port free that the other had
    just handed to a mesh still starting, and that mesh failed with EADDRINUSE. Disjoint
    shares cannot collide.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return ports
    index, total = int(worker[2:]), max(int(count), 1)
    size = len(ports) // total
    return range(ports.start + index * size, ports.start + (index + 1) * size)


_PORTS = _own_share(_below_ephemeral_range())
_next_port = _PORTS.start + os.getpid() % len(_PORTS)


def free_port() -> int:
    """A port nothing holds now, for a mesh process a test or benchmark starts.

    Not one the kernel picks for port 0: that comes from the ephemeral range, where any
    outgoing connection (a gRPC client, a scrape) can take it before the server binds it,
    which CI saw as EADDRINUSE. And never the same one twice in a process.
    """
    global _next_port
    for _ in range(len(_PORTS)):
        port = _next_port
        _next_port = _PORTS.start + (port + 1 - _PORTS.start) % len(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_PORTS}")


def mesh_config(
    workdir: Path,
    workers: list[dict[str, Any]],
    scheduler: dict[str, Any] | None = None,
    registry_path: str | None = None,
) -> dict[str, Any]:
    """A whole-mesh config on loopback; `workers` entries override the per-worker defaults;
    `registry_path` replaces the shipped registry."""
    scheduler_port = free_port()
    config: dict[str, Any] = {
        "models_dir": str(MODELS_DIR),
        "gateway": {
            "host": "127.0.0.1",
            "port": free_port(),
            "metrics_port": free_port(),
            # On a port of its own: at 8080 it would clash between parallel meshes.
            "http_port": free_port(),
            "scheduler_address": f"127.0.0.1:{scheduler_port}",
            "tenants": {"default": UNLIMITED_TENANT},
        },
        "scheduler": {
            "host": "127.0.0.1",
            "port": scheduler_port,
            "metrics_port": free_port(),
            "store_path": str(workdir / "state" / "jobs.sqlite3"),
            "artifact_dir": str(workdir / "artifacts"),
            # An idle device starts at once (no batch window at c=1); the batch given ahead
            # to a busy worker still waits for its window to fill.
            "batch_window_when_idle": False,
            **(scheduler or {}),
        },
        "workers": [],
    }
    if registry_path is not None:
        config["registry_path"] = registry_path
    for index, overrides in enumerate(workers):
        entry = {
            "worker_id": f"worker-{index}",
            "host": "127.0.0.1",
            "port": free_port(),
            "metrics_port": free_port(),
            "scheduler_address": f"127.0.0.1:{scheduler_port}",
            "checkpoint_dir": str(workdir / "artifacts" / "checkpoints"),
            # Short: a benchmark's mesh is stopped with work still queued.
            "drain_grace_s": 2,
            **overrides,
        }
        config["workers"].append(entry)
    return config


def public_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config as recorded in a result: ports and temp paths vary per run and say nothing."""
    workers = [
        {
            k: v
            for k, v in w.items()
            if k not in ("port", "metrics_port", "checkpoint_dir", "host", "scheduler_address")
        }
        for w in config["workers"]
    ]
    scheduler = {
        k: v
        for k, v in config["scheduler"].items()
        if k not in ("port", "metrics_port", "store_path", "artifact_dir", "host")
    }
    return {"scheduler": scheduler, "workers": workers, "gateway_tenant": UNLIMITED_TENANT}


@dataclass
class Mesh:
    process: subprocess.Popen
    config: dict[str, Any]
    run_dir: Path
    output: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return f"127.0.0.1:{self.config['gateway']['port']}"

    @property
    def http(self) -> str:
        """The gateway's HTTP face."""
        return f"127.0.0.1:{self.config['gateway']['http_port']}"

    @property
    def scheduler(self) -> str:
        return f"127.0.0.1:{self.config['scheduler']['port']}"

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def child_pid(self, role: str, worker_id: str | None = None) -> int:
        """The pid of the scheduler, gateway or a worker process `mediamesh up` started."""
        for child in self.children():
            try:
                argv = child.cmdline()
            except psutil.Error:
                continue
            # `python -m mediamesh.cli.main <role> ...`: match the role word, not a path.
            if role not in argv[3:5]:
                continue
            if worker_id is None or worker_id in argv:
                return child.pid
        raise LookupError(f"no {role} {worker_id or ''} process under mediamesh up")

    def processes(self) -> dict[str, psutil.Process]:
        """The scheduler, the gateway and each worker (by its worker id) process."""
        found = {role: psutil.Process(self.child_pid(role)) for role in ("scheduler", "gateway")}
        for worker in self.config["workers"]:
            worker_id = worker["worker_id"]
            found[worker_id] = psutil.Process(self.child_pid("worker", worker_id))
        return found

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds the scheduler, the gateway and the workers together have used so far."""
        used = {"scheduler": 0.0, "gateway": 0.0, "workers": 0.0}
        for name, process in self.processes().items():
            used[name if name in used else "workers"] += process_cpu_seconds(process)
        return used

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.run_dir.glob("*.log"))
        )


def _start(workdir: Path, config: dict[str, Any]) -> Mesh:
    path = workdir / "mesh.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = workdir / "run"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    argv = [sys.executable, "-m", "mediamesh.cli.main", "up", "--config", str(path)]
    argv += ["--run-dir", str(run_dir), "--ready-timeout", str(READY_TIMEOUT_S)]
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    mesh = Mesh(process, config, run_dir)
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            mesh.output.append(line)
            if line.startswith("mediamesh ready:"):
                ready.set()
        ready.set()  # exited: stop waiting

    threading.Thread(target=pump, daemon=True).start()
    ready.wait(READY_TIMEOUT_S + 10)
    if process.poll() is not None or not any(
        line.startswith("mediamesh ready:") for line in mesh.output
    ):
        tail = mesh.log_tail()
        stop(mesh)
        raise RuntimeError(f"mesh did not become ready: {''.join(mesh.output)}\n{tail}")
    return mesh


def stop(mesh: Mesh) -> None:
    """Ctrl-C, then make sure nothing it started is left running."""
    children = mesh.children()
    if mesh.process.poll() is None:
        mesh.process.send_signal(signal.SIGINT)
        try:
            mesh.process.wait(60)
        except subprocess.TimeoutExpired:
            log("mediamesh up did not stop within 60 s; killing it")
            mesh.process.kill()
            mesh.process.wait()
    # Children restarted after the snapshot are children of `up` too; look again.
    _gone, alive = psutil.wait_procs(children + mesh.children(), timeout=15)
    for proc in alive:
        log(f"killing leftover process {proc.pid}")
        proc.kill()


def process_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds (user and system, every thread) `process` has used so far."""
    times = process.cpu_times()
    return times.user + times.system


@contextmanager
def running_mesh(
    workers: list[dict[str, Any]],
    scheduler: dict[str, Any] | None = None,
    registry_path: str | None = None,
) -> Iterator[Mesh]:
    # In the work tree, as `mediamesh up` keeps its state under .mediamesh/, not in /tmp:
    # creating a file in this machine's /tmp costs about 180 us of CPU against 14 us here
    # (same ext4 volume), and the scheduler creates one per result.
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mediamesh-bench-", dir=RUNS_DIR) as tmp:
        workdir = Path(tmp)
        config = mesh_config(workdir, workers, scheduler, registry_path)
        started = time.monotonic()
        mesh = _start(workdir, config)
        log(f"mesh ready in {time.monotonic() - started:.1f} s at {mesh.gateway}")
        try:
            yield mesh
        finally:
            stop(mesh)


class MeshSession:
    """Hands each benchmark a mesh. With `shared` (the smoke run) one mesh, started on first
    use with that config, serves every benchmark: starting four meshes would take longer on
    two cores than the smoke run's whole budget."""

    def __init__(self, shared: tuple[list[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.shared = shared
        self._stack = contextlib.ExitStack()
        self._mesh: Mesh | None = None

    @contextmanager
    def mesh(
        self,
        workers: list[dict[str, Any]],
        scheduler: dict[str, Any] | None = None,
        registry_path: str | None = None,
    ) -> Iterator[Mesh]:
        if self.shared is None:
            with running_mesh(workers, scheduler, registry_path) as mesh:
                yield mesh
            return
        if self._mesh is None or self._mesh.process.poll() is not None:
            self._mesh = self._stack.enter_context(running_mesh(*self.shared))
        yield self._mesh

    def close(self) -> None:
        self._stack.close()
        self._mesh = None
