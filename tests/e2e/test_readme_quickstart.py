"""The README quickstart, run verbatim against a mesh started the way `make run` starts it.

The shell blocks after `<!-- quickstart -->` in README.md are split into commands and each
one runs with bash, from a directory laid out like a checkout (`.venv` linked in), while
`mediamesh up --models-dir …` runs there with its default config: the README's addresses
are the default ports, so they must be free. A README edit that breaks a command fails here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediamesh.common.settings import MeshConfig
from tests.conftest import ROOT
from tests.e2e.conftest import port_bound

# Serial: it needs the default ports, inside this machine's ephemeral range (32768-60999),
# where a parallel test's port-0 server or outgoing connection can sit for a while.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

MARKER = "<!-- quickstart -->"
VENV = ROOT / ".venv"
READY_TIMEOUT_S = 300
COMMAND_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def quickstart_commands(readme: str) -> list[str]:
    """The commands of every ```sh block right after a marker, continuation lines joined,
    blank and comment lines dropped."""
    lines = readme.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    assert starts, f"README.md must mark its quickstart shell block(s) with {MARKER}"
    commands: list[str] = []
    for start in starts:
        assert lines[start + 1].startswith("```sh"), f"{MARKER} must precede a ```sh block"
        end = next(i for i in range(start + 2, len(lines)) if lines[i].startswith("```"))
        pending = ""
        for line in lines[start + 2 : end]:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def default_ports() -> list[int]:
    """The ports of the config `make run` uses, which the README's addresses name."""
    config = MeshConfig()
    ports = [config.gateway.port, config.scheduler.port]
    ports += [p for p in (config.gateway.metrics_port, config.scheduler.metrics_port) if p]
    ports += [config.gateway.http_port] if config.gateway.http_port else []
    for worker in config.workers:
        ports += [worker.port, *([worker.metrics_port] if worker.metrics_port else [])]
    return ports


def test_the_quickstart_names_what_the_readme_promises():
    commands = quickstart_commands((ROOT / "README.md").read_text())
    for needed in (
        ".venv/bin/mediamesh generate",
        ".venv/bin/grpcurl",
        ".venv/bin/mediamesh status",
    ):
        assert any(c.startswith(needed) for c in commands), f"no `{needed}` in the quickstart"


@pytest.fixture
def checkout_like_dir(tmp_path: Path) -> Path:
    """A working directory where `.venv/bin/…` resolves as in the checkout, and where `up`'s
    run directory, job store and artifacts stay out of the real checkout."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(VENV)
    return workdir


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAMESH_")}
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def busy_default_ports(wait_s: float = 20.0) -> list[int]:
    """The default ports still held after up to `wait_s`: a connection that borrowed one as
    its ephemeral port lets it go within seconds, a `make run` mesh does not."""
    deadline = time.monotonic() + wait_s
    while True:
        busy = [port for port in default_ports() if port_bound(port)]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(0.5)


@pytest.fixture
def make_run_mesh(checkout_like_dir: Path, models_dir: Path) -> Iterator[list[str]]:
    """`mediamesh up` with the default config, as `make run` starts it; stopped with Ctrl-C,
    then its whole process group is killed, whatever the test did."""
    busy = busy_default_ports()
    if busy:
        pytest.fail(
            f"the README quickstart uses the default ports, and {busy} are in use "
            "(a `make run` mesh?): stop it and run this test again"
        )
    process = subprocess.Popen(
        [str(VENV / "bin" / "mediamesh"), "up", "--models-dir", str(models_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=checkout_like_dir,
        env=clean_env(),
        start_new_session=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if line.startswith("mediamesh ready:"):
                ready.set()
        ready.set()  # exited: stop waiting

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(READY_TIMEOUT_S) and process.poll() is None, "".join(output)
        yield output
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children that outlived it, if any
        process.wait(10)


@pytest.mark.timeout(READY_TIMEOUT_S + 300)
def test_the_readme_quickstart_works_as_written(make_run_mesh, checkout_like_dir: Path):
    commands = quickstart_commands((ROOT / "README.md").read_text())
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=checkout_like_dir,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        report = f"README quickstart command failed:\n$ {command}\n{result.stdout}{result.stderr}"
        assert result.returncode == 0, report
        assert '"error":' not in result.stdout, report  # a streamed job error exits 0
