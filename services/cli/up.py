"""`mediamesh up`: scheduler, gateway and workers as child processes on loopback.

Children die with the parent (PR_SET_PDEATHSIG), a child that exits unexpectedly is
restarted after a short back-off, and Ctrl-C or SIGTERM stops them all: workers first
(they drain), then the gateway, then the scheduler.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr, TypeAdapter

from mediamesh.cli.core_sharing import with_shared_cores
from mediamesh.cli.run_dir import hold_run_dir, run_config_path, write_private
from mediamesh.cli.tls_readiness import https_ready, tls_handshake_completes
from mediamesh.common.api.health import is_serving
from mediamesh.common.config_loader import ENV_PREFIX, ConfigError
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.exclusive_lock import ExclusiveLock
from mediamesh.common.registry import Registry
from mediamesh.common.server import public_tls
from mediamesh.common.settings import InternalAuthSettings, MeshConfig

_PR_SET_PDEATHSIG = 1
# What `mediamesh up` exits with (see `mediamesh up --help`): a configuration it refuses
# before starting anything exits 2, as the load of a bad config does; a signal during
# start-up exits as a shell reports one (128 + it).
EXIT_NOT_READY = 1
EXIT_CONFIG = 2
# SIGINT 130, SIGTERM 143.
EXIT_SIGNAL_BASE = 128


def refuse_unstartable(config: MeshConfig, registry: Registry) -> None:
    """ConfigError, naming the field, for what the children would refuse or `up` could not
    wait for, found before any child starts: a port 0 (the service would bind a random
    port that `up` cannot dial to see it ready), two listeners on one port, a gateway TLS
    file that cannot be read, and a worker model not in the registry."""
    ports = [
        ("scheduler.port", config.scheduler.port),
        ("gateway.port", config.gateway.port),
        # `up` prints the HTTP face's URL, which a free port would leave unknown.
        ("gateway.http_port", config.gateway.http_port),
        *((f"workers[{i}].port", w.port) for i, w in enumerate(config.workers)),
    ]
    for field_name, port in ports:
        if port == 0:
            raise ConfigError(
                f"{field_name}: 0 (any free port) cannot be used by `mediamesh up`, which "
                "dials each service's port to see it ready; give a port from 1 to 65535"
            )
    _refuse_shared_ports(config)
    # Reads and checks the gateway's TLS pair as the gateway will (ConfigError naming
    # gateway.tls.cert_file or key_file).
    public_tls(config.gateway.tls)
    known = {spec.name for spec in registry.models}
    for i, worker in enumerate(config.workers):
        unknown = [m for m in worker.models if m not in known]
        if unknown:
            raise ConfigError(
                f"workers[{i}].models: {', '.join(unknown)} not in the registry "
                f"(worker {worker.worker_id!r}; known: {', '.join(sorted(known))})"
            )


# Hosts that bind every interface, so that they clash with any host on the same port.
_EVERY_INTERFACE = frozenset({"0.0.0.0", "::", "[::]", ""})
# Names of the IPv4 loopback address a listener binds alike.
_LOOPBACK_V4 = frozenset({"127.0.0.1", "localhost"})


def _same_host(host: str, other: str) -> bool:
    return host == other or (host.lower() in _LOOPBACK_V4 and other.lower() in _LOOPBACK_V4)


def _listeners(config: MeshConfig) -> list[tuple[str, str, int]]:
    """Each port the children of `up` listen on: (field, host, port)."""
    s, g = config.scheduler, config.gateway
    listeners: list[tuple[str, str, int | None]] = [
        ("scheduler.port", s.host, s.port),
        ("scheduler.metrics_port", s.metrics_host, s.metrics_port),
        ("scheduler.health_port", s.host, s.health_port),
        ("gateway.port", g.host, g.port),
        ("gateway.http_port", g.host, g.http_port),
        ("gateway.metrics_port", g.metrics_host, g.metrics_port),
    ]
    for i, w in enumerate(config.workers):
        listeners += [
            (f"workers[{i}].port", w.host, w.port),
            (f"workers[{i}].metrics_port", w.metrics_host, w.metrics_port),
            (f"workers[{i}].health_port", w.host, w.health_port),
        ]
    return [(name, host, port) for name, host, port in listeners if port]


def _refuse_shared_ports(config: MeshConfig) -> None:
    """ConfigError naming both fields when two children would listen on one port: the
    second would fail only once the first had started, as "address already in use"."""
    seen: list[tuple[str, str, int]] = []
    for name, host, port in _listeners(config):
        for other, other_host, other_port in seen:
            every = host in _EVERY_INTERFACE or other_host in _EVERY_INTERFACE
            if port == other_port and (_same_host(host, other_host) or every):
                raise ConfigError(
                    f"{name}: {port} is {other}'s too (on {other_host or 'every interface'}); "
                    "give each service's listener a port of its own"
                )
        seen.append((name, host, port))


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


# A child that exits is restarted at once the first time, then after a back-off that grows
# by this much with each further exit in a row, up to the most: a crash loop does not spin,
# and one crash costs no wait (a scheduler killed once served again 0.5 s later for nothing).
# A child that ran RESTART_STREAK_RESET_S before it exited starts a new streak, so a crash
# after a quiet day is not delayed by the crashes of the day before.
RESTART_BACKOFF_STEP_S = 0.5
RESTART_BACKOFF_MAX_S = 5.0
RESTART_STREAK_RESET_S = 60.0


@dataclass
class Child:
    name: str
    argv: list[str]
    address: str
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    # Exits in quick succession, each within RESTART_STREAK_RESET_S of its start.
    exit_streak: int = 0
    started_at: float = field(default=0.0)
    log_path: Path | None = None
    # Where this run's output starts in the log, which earlier runs appended to.
    log_offset: int = 0

    def start(self, log_dir: Path) -> None:
        self.log_path = log_dir / f"{self.name}.log"
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log_file = self.log_path.open("ab")
        # The run config already holds the environment's overrides under the flags': applied
        # again in a child, a MEDIAMESH_* variable would win over a flag of `mediamesh up`.
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}

        self.process = subprocess.Popen(
            self.argv,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        self.started_at = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart_delay(self, now: float) -> float:
        """Count an exit seen at `now` (monotonic seconds); the back-off before restarting."""
        self.restarts += 1
        quiet = now - self.started_at >= RESTART_STREAK_RESET_S
        self.exit_streak = 1 if quiet else self.exit_streak + 1
        return min(RESTART_BACKOFF_STEP_S * (self.exit_streak - 1), RESTART_BACKOFF_MAX_S)

    def exit_reason(self) -> str | None:
        """Why this run exited, as its log says: the one-line error it printed
        (`mediamesh: ...`), else the exception of a traceback it died with; None when the
        log says neither (killed by a signal, say)."""
        if self.log_path is None or not self.log_path.exists():
            return None
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            lines = log.read().decode(errors="replace").splitlines()
        prefix = "mediamesh: "
        reasons = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
        return reasons[-1] if reasons else _raised(lines)


def _raised(lines: list[str]) -> str | None:
    """The exception line of the last traceback in `lines`: the first line after its header
    that is not an indented frame (the last exception of a chain has the last header)."""
    headers = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not headers:
        return None
    after = lines[headers[-1] + 1 :]
    return next((line for line in after if line.strip() and not line[0].isspace()), None)


_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def dump_config(config: MeshConfig) -> dict[str, Any]:
    """The config as YAML-ready data, every secret in clear (the children read them back:
    masked, a webhook secret became the mask, and every signature was made with it)."""
    data: dict[str, Any] = _JSON.dump_python(_revealed(config.model_dump()), mode="json")
    return data


def _revealed(value: object) -> object:
    """`value` (a model_dump) with each secret replaced by what it hides."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {key: _revealed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_revealed(item) for item in value]
    return value


class Mesh:
    def __init__(self, config: MeshConfig, run_dir: Path, restart: bool = True) -> None:
        if not config.internal_auth.configured:
            # Internal services never run open: mint a token for this mesh's lifetime. One
            # configured but empty is refused below (from_config), never replaced or ignored.
            auth = InternalAuthSettings(token=SecretStr(secrets.token_urlsafe(24)))
            config = config.model_copy(update={"internal_auth": auth})
        # All on this host: CPU workers without torch_threads share its cores, less one.
        config = with_shared_cores(config, os.cpu_count() or 1)
        self.config = config
        self.internal_credentials = InternalCredentials.from_config(config)
        self.run_dir = run_dir
        self.restart = restart
        run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = run_config_path(run_dir)
        # It holds the internal token: readable by this user only. Written once every check
        # passed, under run_up's lock on the run dir: it is what a running mesh's restarted
        # children read.
        write_private(self.config_path, yaml.safe_dump(dump_config(config)))
        entry = [sys.executable, "-m", "mediamesh.cli.main"]
        base = ["--config", str(self.config_path)]
        s, g = config.scheduler, config.gateway
        self.scheduler = Child("scheduler", [*entry, "scheduler", *base], f"{s.host}:{s.port}")
        self.gateway = Child("gateway", [*entry, "gateway", *base], f"{g.host}:{g.port}")
        self.workers = [
            Child(
                w.worker_id,
                [*entry, "worker", *base, "--worker-id", w.worker_id],
                f"{w.host}:{w.port}",
            )
            for w in config.workers
        ]
        self._stopping = False

    @property
    def children(self) -> list[Child]:
        return [self.scheduler, self.gateway, *self.workers]

    def start(self) -> None:
        for child in self.children:
            child.start(self.run_dir)

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._stopping:
                return False
            dead = [c for c in self.children if not c.alive]
            if dead:
                raise StartUpFailed(dead)
            if not self.not_ready():
                return True
            time.sleep(0.25)
        return False

    def not_ready(self) -> list[str]:
        """What is not ready yet: each child not serving by name and address, and the
        workers serving but not yet registered with the scheduler."""
        waiting = [f"{c.name} ({c.address})" for c in self.children if not self._serving(c)]
        if waiting:
            return waiting
        from mediamesh.cli.api.mesh_client import registered_workers

        registered = registered_workers(self.config)
        return [
            f"{w.worker_id} (serving, not registered with the scheduler)"
            for w in self.config.workers
            if w.worker_id not in registered
        ]

    def _serving(self, child: Child) -> bool:
        # The gateway's listener is public; the others speak the internal credential's TLS.
        internal = None if child is self.gateway else self.internal_credentials
        if child is self.gateway and self.config.gateway.tls.enabled:
            return self._tls_gateway_ready()
        if child is self.gateway and not self._http_listening():
            return False
        return is_serving(child.address, credentials=internal)

    def _tls_gateway_ready(self) -> bool:
        """A TLS gateway's readiness: its gRPC listener completes a handshake and, with the
        HTTP face on, /readyz answers 200 (the gateway reaches its scheduler). Without the
        HTTP face only the listener is seen; the scheduler's own health is checked apart."""
        g = self.config.gateway
        if not tls_handshake_completes(g.host, g.port):
            return False
        return not g.http_port or https_ready(g.host, g.http_port)

    @property
    def http_url(self) -> str | None:
        """The gateway's HTTP face, when it has one."""
        g = self.config.gateway
        if g.http_port is None:
            return None
        scheme = "https" if g.tls.enabled else "http"
        host = f"[{g.host}]" if ":" in g.host else g.host
        return f"{scheme}://{host}:{g.http_port}"

    def _http_listening(self) -> bool:
        g = self.config.gateway
        if not g.http_port:
            return True  # off, or a free port this process cannot know
        try:
            with socket.create_connection((g.host, g.http_port), timeout=0.5):
                return True
        except OSError:
            return False

    def supervise(self) -> None:
        """Restart children that exit unexpectedly, until stop() is called."""
        while not self._stopping:
            for child in self.children:
                if child.process is not None and not child.alive and not self._stopping:
                    code = child.process.returncode
                    if not self.restart:
                        continue
                    delay = child.restart_delay(time.monotonic())
                    print(
                        f"mediamesh: {child.name} exited ({code}); restarting in {delay:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(delay)
                    child.start(self.run_dir)
            time.sleep(0.2)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping = True
        for group in (self.workers, [self.gateway], [self.scheduler]):
            for child in group:
                if child.alive:
                    child.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            deadline = time.monotonic() + timeout_s
            for child in group:
                if child.process is None:
                    continue
                try:
                    child.process.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    child.process.kill()
                    child.process.wait()


class StartUpFailed(RuntimeError):
    """Children exited before the mesh was ready; the message says why each did.

    `up` exits 1 for it (EXIT_NOT_READY), not 2, even when the child refused its
    configuration: a child exits 2 for a ConfigError and for a StartupError alike (a port
    in use, a model that does not fit), so its code cannot tell a configuration error
    from the machine's state. What `up` can check itself it checks before starting
    anything (`refuse_unstartable`), and exits 2 for."""

    def __init__(self, dead: list[Child]) -> None:
        super().__init__("; ".join(_start_up_failure(c) for c in dead))


def _start_up_failure(child: Child) -> str:
    reason = child.exit_reason()
    if reason is None:
        return f"{child.name} exited during start-up; see {child.log_path}"
    return f"{child.name} exited during start-up: {reason} (log: {child.log_path})"


def run_up(
    config: MeshConfig,
    run_dir: Path,
    ready_timeout_s: float,
    restart: bool,
    run_lock: ExclusiveLock | None = None,
) -> int:
    """Starts the mesh and supervises it until a signal; the exit code (EXIT_*). Holds
    `run_dir` throughout (`run_lock` when the caller took it already): a second `up` there
    is refused (StartupError) before it writes."""
    run_lock = run_lock or hold_run_dir(run_dir)
    try:
        return _run_mesh(Mesh(config, run_dir, restart=restart), run_dir, ready_timeout_s)
    finally:
        run_lock.release()


def _run_mesh(mesh: Mesh, run_dir: Path, ready_timeout_s: float) -> int:
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        mesh._stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    mesh.start()
    try:
        if not mesh.wait_ready(ready_timeout_s):
            if received:
                # Stopped before it was ready: not a clean run, and a script must see that.
                name = signal.Signals(received[0]).name
                print(f"mediamesh: {name} before the mesh was ready; stopping", file=sys.stderr)
                return EXIT_SIGNAL_BASE + received[0]
            waiting = "; ".join(mesh.not_ready())
            print(
                f"mediamesh: not ready after {time.monotonic() - started:.0f} s "
                f"(--ready-timeout {ready_timeout_s:g}); waiting for {waiting}; logs in {run_dir}",
                file=sys.stderr,
            )
            return EXIT_NOT_READY
        http = f", http {mesh.http_url}" if mesh.http_url else ""
        print(f"mediamesh ready: gateway {mesh.gateway.address}{http}", flush=True)
        mesh.supervise()
        # A signal once the mesh was ready is how it is meant to stop: a clean exit.
        return 0
    except StartUpFailed as exc:
        print(f"mediamesh: {exc}", file=sys.stderr)
        return EXIT_NOT_READY
    finally:
        mesh.stop()
        print("mediamesh stopped", flush=True)
