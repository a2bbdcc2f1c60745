"""The wheel as a user gets it: built from a copy of the tree, one top-level package with its
data, installed into a fresh venv with the pinned constraints, and run from there with no
checkout in sight: `mediamesh models build`, `mediamesh up`, one `generate`, `simulate small`.

Every step has a time limit and runs in its own process group, killed whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.launcher import free_port
from tests.conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TORCH_SPEC = "torch==2.13.0"  # the Makefile's TORCH_SPEC: the CPU build, from local disk
# Build outputs and caches of a working checkout: a fresh clone has none of them, and a
# stale build/ would put files in the wheel that the tree no longer has.
NOT_COPIED_AT_TOP = {".git", ".venv", ".mediamesh", "build", "dist"}
NOT_COPIED = {"__pycache__", "*.egg-info", ".*_cache", ".hypothesis", ".pytest_cache"}


def run_bounded(
    argv: list[str],
    timeout_s: float,
    steps: dict[str, float],
    name: str,
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs `argv` in its own process group, kills the group at `timeout_s` or on any exit,
    records its wall time in `steps`, and fails with its output on a non-zero exit."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=cwd,
        env=env,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} ran past {timeout_s:.0f} s: {' '.join(argv)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        steps[name] = time.monotonic() - started
    result = subprocess.CompletedProcess(argv, process.returncode, output, "")
    assert result.returncode == 0, f"{name} failed ({result.returncode}):\n{output[-4000:]}"
    return result


def copy_tree(destination: Path) -> Path:
    """The source tree as a fresh clone (plus uncommitted work) would have it."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(shutil.ignore_patterns(*NOT_COPIED)(folder, names))
        if Path(folder) == ROOT:
            skipped |= NOT_COPIED_AT_TOP & set(names)
        return skipped

    shutil.copytree(ROOT, destination, ignore=ignore, symlinks=True)
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build --wheel` of a copy of the tree (build isolation, as a user builds)."""
    work = tmp_path_factory.mktemp("wheel")
    source = copy_tree(work / "src")
    run_bounded(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(source)],
        300,
        {},
        "build the wheel",
        cwd=work,
    )
    (built,) = (work / "dist").glob("mediamesh-*.whl")
    return built


def expected_files(services: Path) -> set[str]:
    """What the wheel must hold, from the `services/` folder it was built from: every
    module and stub, the default registry, the scenarios, the web page and the typing marker."""
    found = [*services.rglob("*.py"), *services.rglob("*.pyi"), *services.glob("sim/scenarios/*")]
    found += services.glob("gateway/web/static/*")
    names = {f"mediamesh/{p.relative_to(services)}" for p in found if "__pycache__" not in p.parts}
    return names | {"mediamesh/common/defaults/models.yaml", "mediamesh/py.typed"}


def test_the_wheel_holds_one_top_level_package_with_its_data(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        top_level = archive.read(f"{dist_info}/top_level.txt").decode().split()
        record = archive.read(f"{dist_info}/RECORD").decode().splitlines()
    assert top_level == ["mediamesh"]
    recorded = {line.split(",")[0] for line in record if line}
    assert recorded == names
    assert {n.split("/")[0] for n in names} == {"mediamesh", dist_info}

    # The copy the wheel was built from: the checkout may have changed since.
    expected = expected_files(wheel.parent.parent / "src" / "services")
    assert any(n.endswith(".pyi") for n in expected)
    assert "mediamesh/sim/scenarios/small.yaml" in expected
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel: {missing}"


def clean_env(venv: Path) -> dict[str, str]:
    """This machine's environment minus anything that points back into the checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEDIAMESH_") and k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not _inside(Path(p), ROOT)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


@contextlib.contextmanager
def background_up(
    argv: list[str], ready_timeout_s: float, *, cwd: Path, env: dict[str, str]
) -> Iterator[None]:
    """`mediamesh up` until the block ends: Ctrl-C, then the whole process group is killed."""
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=cwd,
        env=env,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if line.startswith("mediamesh ready:"):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        ready.wait(ready_timeout_s)
        assert process.poll() is None and any(
            line.startswith("mediamesh ready:") for line in output
        ), f"mediamesh up not ready:\n{''.join(output)[-4000:]}"
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def mesh_config(run: Path) -> dict[str, Any]:
    """One flux-tiny worker on free loopback ports, every path under `run`."""
    scheduler_port = free_port()
    return {
        "models_dir": str(run / "models"),
        "gateway": {
            "port": free_port(),
            "metrics_port": free_port(),
            "http_port": free_port(),
            "scheduler_address": f"127.0.0.1:{scheduler_port}",
        },
        "scheduler": {
            "port": scheduler_port,
            "metrics_port": free_port(),
            "store_path": str(run / "state" / "jobs.sqlite3"),
            "artifact_dir": str(run / "artifacts"),
        },
        "workers": [
            {
                "worker_id": "worker-0",
                "port": free_port(),
                "metrics_port": free_port(),
                "models": ["flux-tiny"],
                "torch_threads": 1,
                "scheduler_address": f"127.0.0.1:{scheduler_port}",
            }
        ],
    }


@pytest.mark.timeout(1500)
def test_the_wheel_in_a_fresh_venv_builds_models_runs_a_mesh_and_simulates(
    wheel: Path, tmp_path: Path
):
    steps: dict[str, float] = {}
    venv, run = tmp_path / "venv", tmp_path / "run"
    run.mkdir()
    assert not _inside(run, ROOT)
    env = clean_env(venv)
    python, mediamesh = str(venv / "bin" / "python"), str(venv / "bin" / "mediamesh")
    constraints = ["-c", str(ROOT / "constraints.txt")]

    # Without a pip of its own (ensurepip takes seconds): this pip installs into it.
    venv_argv = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
    run_bounded(venv_argv, 120, steps, "venv", env=env, cwd=run)
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", *constraints]
    run_bounded([*pip, TORCH_SPEC], 600, steps, "pip install torch", env=env, cwd=run)
    run_bounded([*pip, f"{wheel}[sim]"], 900, steps, "pip install the wheel", env=env, cwd=run)

    probe = "import json, sys, mediamesh; print(json.dumps([mediamesh.__file__, sys.path]))"
    found = run_bounded([python, "-c", probe], 60, steps, "import", env=env, cwd=run)
    module_file, sys_path = json.loads(found.stdout.strip().splitlines()[-1])
    assert _inside(Path(module_file), venv), module_file
    assert not [p for p in sys_path if p and _inside(Path(p), ROOT)], sys_path

    run_bounded(
        [mediamesh, "models", "build", "--out", str(run / "models")],
        300,
        steps,
        "models build",
        env=env,
        cwd=run,
    )
    config = mesh_config(run)
    (run / "mesh.yaml").write_text(yaml.safe_dump(config))
    gateway = f"127.0.0.1:{config['gateway']['port']}"
    started = time.monotonic()
    with background_up(
        [mediamesh, "up", "--config", "mesh.yaml", "--run-dir", "mesh-run"],
        ready_timeout_s=300,
        env=env,
        cwd=run,
    ):
        steps["up (ready)"] = time.monotonic() - started
        prompt = ["--model", "flux-tiny", "--prompt", "a red fox", "--steps", "2"]
        run_bounded(
            [mediamesh, "generate", "--gateway", gateway, *prompt, "--out", "fox.png", "--quiet"],
            120,
            steps,
            "generate",
            env=env,
            cwd=run,
        )
    assert (run / "fox.png").read_bytes().startswith(b"\x89PNG")

    simulated = run_bounded(
        [mediamesh, "simulate", "small", "--out", "results"],
        300,
        steps,
        "simulate small",
        env=env,
        cwd=run,
    )
    assert (run / "results" / "sim-small.json").is_file(), simulated.stdout
    assert (run / "results" / "sim-small.png").is_file(), simulated.stdout  # the sim extra
    print("wheel test steps (s): " + ", ".join(f"{k} {v:.0f}" for k, v in steps.items()))
