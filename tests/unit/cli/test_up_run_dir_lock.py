"""A second `mediamesh up` on the run directory of a running one is refused at once (exit 2,
naming the directory and the holder's pid) and changes nothing there: the running mesh's
config and token stay as they were. The lock goes with its holder, even one killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediamesh.cli import up
from mediamesh.cli.main import main
from mediamesh.cli.run_dir import RUN_LOCK_NAME, hold_run_dir
from mediamesh.common.errors import StartupError
from mediamesh.common.settings import MeshConfig

RUNNING_CONFIG = "internal_auth: {token: the-running-mesh-token}\n"

_HOLD = (
    "import sys, time; from pathlib import Path; "
    "from mediamesh.common.exclusive_lock import ExclusiveLock; "
    "ExclusiveLock.take(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


@pytest.fixture
def held_run_dir(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A run directory whose lock another process holds, as a running `up` does."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "mesh.yaml").write_text(RUNNING_CONFIG)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run_dir / RUN_LOCK_NAME)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield run_dir, holder
    finally:
        holder.kill()
        holder.wait()


class _RecordingMesh:
    built: list[Path] = []

    def __init__(self, config: MeshConfig, run_dir: Path, restart: bool = True) -> None:
        self.built.append(run_dir)


def test_a_second_up_on_a_running_mesh_s_run_dir_exits_2_and_writes_nothing(
    held_run_dir: tuple[Path, subprocess.Popen[str]], monkeypatch, capsys
) -> None:
    run_dir, holder = held_run_dir
    before = sorted(p.name for p in run_dir.iterdir())
    monkeypatch.setattr(up, "Mesh", _RecordingMesh)
    _RecordingMesh.built = []

    assert main(["up", "--no-build", "--run-dir", str(run_dir)]) == 2

    assert _RecordingMesh.built == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"mediamesh: --run-dir: {run_dir} is in use by another `mediamesh up`")
    assert f"(pid {holder.pid}," in err
    assert (run_dir / "mesh.yaml").read_text() == RUNNING_CONFIG
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_the_run_dir_is_free_once_its_holder_is_killed(
    held_run_dir: tuple[Path, subprocess.Popen[str]],
) -> None:
    run_dir, holder = held_run_dir
    with pytest.raises(StartupError):
        hold_run_dir(run_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    hold_run_dir(run_dir).release()


class _WaitingMesh:
    """A mesh that is never ready; while `up` waits, a second `up` tries the run dir."""

    refusal: list[str] = []

    def __init__(self, config: MeshConfig, run_dir: Path, restart: bool = True) -> None:
        self.run_dir = run_dir

    def start(self) -> None:
        pass

    def wait_ready(self, timeout_s: float) -> bool:
        with pytest.raises(StartupError) as caught:
            hold_run_dir(self.run_dir)
        self.refusal.append(str(caught.value))
        return False

    def not_ready(self) -> list[str]:
        return ["gateway"]

    def stop(self) -> None:
        pass


def test_up_holds_its_run_dir_while_it_runs_and_lets_go_after(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(up, "Mesh", _WaitingMesh)
    _WaitingMesh.refusal = []
    try:
        assert up.run_up(MeshConfig(), tmp_path, 0.0, restart=True) == up.EXIT_NOT_READY
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert _WaitingMesh.refusal and "is in use by another `mediamesh up`" in _WaitingMesh.refusal[0]
    hold_run_dir(tmp_path).release()
