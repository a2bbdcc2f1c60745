"""The import contracts in pyproject.toml hold, and each one fails on the import it forbids."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# At least one probe per contract: an import that contract forbids, appended to the module
# (created when missing). New modules show that the contracts cover code added later.
PROBES = [
    ("scheduler/core/probe.py", "import asyncio"),
    ("worker/core/probe.py", "import torch"),
    ("common/errors.py", "import grpc"),
    ("gateway/core/probe.py", "from mediamesh.common.generated.v1 import common_pb2"),
    ("scheduler/probe.py", "import mediamesh.gateway.core.tenancy"),
    ("common/probe.py", "import mediamesh.cli.main"),
    ("worker/models/probe.py", "import mediamesh.worker.parallel.sync"),
    ("sim/engine.py", "import mediamesh.scheduler.core.scheduler"),
    ("gateway/http/probe.py", "import grpc"),
]


def _contract_count() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return len(config["tool"]["importlinter"]["contracts"])


def _lint_imports(package_parent: Path | None = None) -> tuple[int, str]:
    env = dict(os.environ)
    if package_parent is not None:
        # Ahead of the editable install on the path, so grimp analyses the probed copy.
        env["PYTHONPATH"] = str(package_parent)
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=package_parent or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def _tally(output: str) -> tuple[int, int]:
    match = re.search(r"Contracts: (\d+) kept, (\d+) broken", output)
    assert match, output
    return int(match.group(1)), int(match.group(2))


def test_every_import_contract_holds() -> None:
    code, output = _lint_imports()
    assert code == 0, output
    assert _tally(output) == (_contract_count(), 0), output
    # grimp found the checkout through the editable install, not a stale copy elsewhere.
    analysed = int(re.search(r"Analyzed (\d+) files", output).group(1))  # type: ignore[union-attr]
    assert analysed >= len(list((ROOT / "services").rglob("*.py")))


def test_each_contract_catches_a_forbidden_import(tmp_path: Path) -> None:
    package = tmp_path / "mediamesh"
    shutil.copytree(ROOT / "services", package, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, statement in PROBES:
        path = package / relative
        existing = path.read_text() if path.exists() else ""
        path.write_text(f"{existing}\n{statement}\n")
    code, output = _lint_imports(tmp_path)
    assert code != 0, output
    kept, broken = _tally(output)
    assert kept == 0, f"{kept} contract(s) no probe breaks; add one to PROBES:\n{output}"
    assert broken == _contract_count(), output
    for relative, _ in PROBES:
        probe_module = "mediamesh." + relative.removesuffix(".py").replace("/", ".")
        assert probe_module in output, f"{probe_module} not reported:\n{output}"
