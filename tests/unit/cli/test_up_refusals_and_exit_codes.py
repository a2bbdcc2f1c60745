"""`mediamesh up` refuses what it cannot start before starting anything (exit 2, naming the
field), says which children are not ready on stderr, and exits 130/143 when a signal stops
it during start-up."""

from __future__ import annotations

import os
import signal
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


def test_two_listeners_on_one_port_are_refused_naming_both() -> None:
    two = MeshConfig.model_validate(
        {"workers": [{"worker_id": "a", "port": 46060}, {"worker_id": "b", "port": 46060}]}
    )
    with pytest.raises(ConfigError, match=r"^workers\[1\]\.port: 46060 is workers\[0\]\.port's"):
        up.refuse_unstartable(two, load_registry())
    metrics = _config(metrics_port=9402)  # the scheduler's metrics port by default
    with pytest.raises(
        ConfigError, match=r"^workers\[0\]\.metrics_port: 9402 is scheduler\.metrics"
    ):
        up.refuse_unstartable(metrics, load_registry())
    # Another loopback address is another listener; every interface clashes with any.
    up.refuse_unstartable(_config(metrics_port=9402, metrics_host="127.0.0.2"), load_registry())
    with pytest.raises(ConfigError, match=r"^workers\[0\]\.metrics_port: 9402"):
        up.refuse_unstartable(_config(metrics_port=9402, metrics_host="0.0.0.0"), load_registry())


def test_localhost_and_127_0_0_1_are_one_listener() -> None:
    # Compared as text they passed, and the worker then failed "address already in use".
    clash = MeshConfig.model_validate(
        {
            "gateway": {"host": "localhost", "http_port": 46061},
            "workers": [{"worker_id": "w0", "port": 46061, "models": ["echo"]}],
        }
    )
    with pytest.raises(ConfigError, match=r"^workers\[0\]\.port: 46061 is gateway\.http_port's"):
        up.refuse_unstartable(clash, load_registry())


def test_an_http_port_0_is_refused_since_up_prints_its_url() -> None:
    free = MeshConfig.model_validate(
        {"gateway": {"http_port": 0}, "workers": [{"worker_id": "w0", "port": 46060}]}
    )
    with pytest.raises(ConfigError, match=r"^gateway\.http_port: 0 \(any free port\)"):
        up.refuse_unstartable(free, load_registry())


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
