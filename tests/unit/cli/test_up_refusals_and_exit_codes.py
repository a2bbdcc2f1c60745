"""`mediamesh up` refuses what it cannot start before starting anything (exit 2, naming the
field), exits 2 too when a child refuses its configuration during start-up (naming it), says
which children are not ready on stderr, and exits 130/143 when a signal stops it during
start-up."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from mediamesh.cli import up
from mediamesh.cli.main import build_parser, main
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import ConfigError, MeshConfig


def _config(**workers: object) -> MeshConfig:
    worker = {"worker_id": "w0", "port": 46060, "models": ["echo"], **workers}
    return MeshConfig.model_validate({"workers": [worker]})


def test_a_worker_port_0_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^workers\[0\]\.port: 0 \(any free port\)"):
        up.refuse_unstartable(_config(port=0), load_registry())


def test_a_worker_model_not_in_the_registry_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^workers\[0\]\.models: nope not in the registry"):
        up.refuse_unstartable(_config(models=["echo", "nope"]), load_registry())


def test_a_startable_config_passes() -> None:
    up.refuse_unstartable(_config(), load_registry())


def test_up_exits_2_before_starting_anything(tmp_path: Path, monkeypatch, capsys) -> None:
    config = tmp_path / "mesh.yaml"
    config.write_text("workers: [{worker_id: w0, port: 0, models: [echo]}]\n")
    started: list[object] = []
    monkeypatch.setattr(up, "run_up", lambda *a, **k: started.append(a) or 0)
    assert main(["up", "--config", str(config), "--no-build", "--run-dir", str(tmp_path)]) == 2
    assert not started
    assert capsys.readouterr().err.startswith("mediamesh: workers[0].port: 0")


class _FakeMesh:
    """A mesh whose children never get ready; `during_wait` runs while up waits."""

    # A plain function set on the class: staticmethod keeps it from binding to the mesh.
    during_wait: staticmethod[[], None] | None = None

    def __init__(self, config: MeshConfig, run_dir: Path, restart: bool = True) -> None:
        self._stopping = False
        self.stopped = False

    def start(self) -> None:
        pass

    def wait_ready(self, timeout_s: float) -> bool:
        if self.during_wait is not None:
            self.during_wait()
        return False

    def not_ready(self) -> list[str]:
        return ["gateway (127.0.0.1:46051)", "w0 (127.0.0.1:46060)"]

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def fake_mesh(monkeypatch):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(up, "Mesh", _FakeMesh)
    yield _FakeMesh
    _FakeMesh.during_wait = None
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_not_ready_names_the_children_on_stderr(fake_mesh, tmp_path: Path, capsys) -> None:
    assert up.run_up(_config(), tmp_path, 0.0, restart=True) == 1
    out, err = capsys.readouterr()
    assert "not ready" not in out
    assert "mediamesh: not ready after 0 s (--ready-timeout 0); waiting for gateway " in err
    assert "w0 (127.0.0.1:46060)" in err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_start_up_exits_128_plus_it(
    fake_mesh, tmp_path: Path, capsys, signum: int, code: int
) -> None:
    fake_mesh.during_wait = staticmethod(lambda: os.kill(os.getpid(), signum))
    assert up.run_up(_config(), tmp_path, 60.0, restart=True) == code
    assert f"{signal.Signals(signum).name} before the mesh was ready" in capsys.readouterr().err


# Stand-ins for the services, run as up's children: one that refuses its configuration as a
# service does (its one line, then exit 2), failures of other kinds, and one that waits to be
# stopped.
REFUSES = (
    "import sys; print('mediamesh: gateway.api_keys: none on 0.0.0.0', file=sys.stderr); "
    "sys.exit(2)"
)
CRASHES = "raise RuntimeError('boom')"
KILLED = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
WAITS = "import time; time.sleep(60)"


class _ScriptedMesh(up.Mesh):
    """The real mesh, whose children run `scripts` (by child name; WAITS for the others)
    rather than the services, and which never sees a child serving: nothing is dialled."""

    scripts: dict[str, str] = {}
    made: list[up.Mesh] = []

    def __init__(self, config: MeshConfig, run_dir: Path, restart: bool = True) -> None:
        super().__init__(config, run_dir, restart)
        for child in self.children:
            child.argv = [sys.executable, "-c", self.scripts.get(child.name, WAITS)]
        self.made.append(self)

    def _serving(self, child: up.Child) -> bool:
        return False


@pytest.fixture
def scripted_mesh(monkeypatch):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(up, "Mesh", _ScriptedMesh)
    monkeypatch.setattr(_ScriptedMesh, "made", [])
    yield _ScriptedMesh
    for mesh in _ScriptedMesh.made:
        for child in mesh.children:
            if child.alive:
                child.process.kill()  # type: ignore[union-attr]
                child.process.wait()  # type: ignore[union-attr]
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_a_child_refusing_its_configuration_exits_2_naming_it(
    scripted_mesh, tmp_path: Path, capsys
) -> None:
    scripted_mesh.scripts = {"gateway": REFUSES}
    assert up.run_up(_config(), tmp_path, 20.0, restart=True) == up.EXIT_CONFIG == 2
    err = capsys.readouterr().err
    assert (
        "mediamesh: gateway exited during start-up, refusing its configuration: "
        f"gateway.api_keys: none on 0.0.0.0 (log: {tmp_path / 'gateway.log'})"
    ) in err
    # The others were stopped, by up: none exited on its own.
    (mesh,) = scripted_mesh.made
    others = [c for c in mesh.children if c is not mesh.gateway]
    assert [c.process.returncode for c in others] == [-signal.SIGTERM] * len(others)


@pytest.mark.parametrize(("script", "reason"), [(CRASHES, "RuntimeError: boom"), (KILLED, None)])
def test_a_child_failing_otherwise_still_exits_1(
    scripted_mesh, tmp_path: Path, capsys, script: str, reason: str | None
) -> None:
    scripted_mesh.scripts = {"w0": script}
    assert up.run_up(_config(), tmp_path, 20.0, restart=True) == up.EXIT_NOT_READY == 1
    err = capsys.readouterr().err
    said = f": {reason} (log: " if reason else "; see "
    assert f"mediamesh: w0 exited during start-up{said}" in err
    assert "refusing" not in err


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        (["generate"], ["--gateway", "--api-key"]),
        (["drain"], ["--address", "--grace-s"]),
        (["healthcheck"], ["--address", "--service", "--timeout"]),
    ],
)
def test_every_flag_has_help(command: list[str], flags: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in flags:
        after = text.split(f"{flag} {flag.lstrip('-').replace('-', '_').upper()} ", 1)[1]
        assert not after.startswith("--"), f"{flag} has no help"
    assert "default:" in text


def test_up_help_states_the_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status:" in text and "130/143" in text and "2 a configuration" in text
