"""What every benchmark shares: the result record, percentiles, and the load generator process."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil

if TYPE_CHECKING:
    from bench.launcher import MeshSession

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
SMOKE_DIR = RESULTS_DIR / "smoke"
LEVEL_FIELDS = (
    "concurrency",
    "requests",
    "errors",
    "throughput_rps",
    "p50_ms",
    "p95_ms",
    "p99_ms",
)


@dataclass(frozen=True)
class Options:
    smoke: bool
    out_dir: Path
    meshes: MeshSession
    # torch intra-op threads of the batching benchmark's worker and of its direct baseline.
    torch_threads: int = 1


def _git(*args: str) -> str | None:
    """A git command's output; None when it failed (e.g. an unpacked wheel, not a checkout)."""
    done = subprocess.run(
        # --no-optional-locks: a read must not refresh the index under someone's feet.
        ["git", "--no-optional-locks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def dirty_paths() -> list[str]:
    """Uncommitted changes as `git status --porcelain` lists them (empty: a clean tree)."""
    return [line for line in (_git("status", "--porcelain") or "").splitlines() if line.strip()]


def changes_outside(folder: Path) -> list[str]:
    """Uncommitted changes (porcelain lines) to files that are not under `folder`."""
    inside = folder.resolve()
    return [
        line
        for line in dirty_paths()
        if not (ROOT / line[3:].strip('"')).resolve().is_relative_to(inside)
    ]


def git_commit(results_dir: Path) -> dict[str, Any]:
    """The commit measured, and whether the code differed from it: changes to the results
    folder itself (this run's own earlier results) do not count."""
    commit = (_git("rev-parse", "HEAD") or "").strip() or "unknown"
    return {"commit": commit, "dirty": bool(changes_outside(results_dir))}


def machine() -> dict[str, Any]:
    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    return {
        "cpu_count": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": version("torch"),
        "grpcio": version("grpcio"),
        # Other tenants of a shared machine make numbers noisy; record how busy it was.
        "load_average_at_start": list(os.getloadavg()),
    }


def percentiles(latencies_ms: Sequence[float]) -> dict[str, float | None]:
    if not latencies_ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    values = np.asarray(latencies_ms, dtype=float)
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "p50_ms": round(float(p50), 3),
        "p95_ms": round(float(p95), 3),
        "p99_ms": round(float(p99), 3),
    }


def level(
    concurrency: int | None,
    latencies_ms: Sequence[float],
    errors: int,
    duration_s: float,
    **extra: Any,
) -> dict[str, Any]:
    """One measured level; throughput counts successful requests only."""
    done = len(latencies_ms)
    throughput = done / duration_s if duration_s > 0 else None
    return {
        "concurrency": concurrency,
        "requests": done + errors,
        "errors": errors,
        "throughput_rps": None if throughput is None else round(throughput, 3),
        **percentiles(latencies_ms),
        "duration_s": round(duration_s, 3),
        # A neighbour's burst shows here: compare with the machine's core count.
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        **extra,
    }


def level_from_load(report: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return level(
        report["concurrency"],
        report["latencies_ms"],
        report["errors"],
        report["duration_s"],
        error_codes=report["error_codes"],
        **extra,
    )


def batch_totals(metrics_port: int, model: str) -> tuple[float, float]:
    """(jobs, batches) the scheduler has dispatched for `model` so far."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in totals:
            if line.startswith(f'mediamesh_batch_size_{part}{{model="{model}"}}'):
                totals[part] += float(line.rsplit(" ", 1)[1])
    return totals["sum"], totals["count"]


@dataclass
class Result:
    name: str
    options: Options
    config: dict[str, Any] = field(default_factory=dict)
    levels: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def save(self) -> Path:
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.options.out_dir / f"{self.name}.json"
        record = {
            "name": self.name,
            "smoke": self.options.smoke,
            "git": git_commit(self.options.out_dir),
            "started": self.started.isoformat(timespec="seconds"),
            "wall_s": round((dt.datetime.now(dt.UTC) - self.started).total_seconds(), 1),
            "machine": machine(),
            "config": self.config,
            "levels": self.levels,
            "summary": self.summary,
            "plot": f"{self.name}.png",
        }
        # Write then rename so a crashed run never leaves half a file behind.
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(path)
        return path

    @property
    def plot_path(self) -> Path:
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        return self.options.out_dir / f"{self.name}.png"


def loadgen_argv(target: str, models: Sequence[str], **flags: Any) -> list[str]:
    argv = [sys.executable, "-m", "bench.loadgen", "--target", target]
    for model in models:
        argv += ["--model", model]
    for key, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def run_loadgen(target: str, models: Sequence[str], timeout_s: float, **flags: Any) -> dict:
    """One closed-loop level in a separate process, so the client never shares our GIL."""
    argv = loadgen_argv(target, models, **flags)
    done = subprocess.run(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return _report(done.returncode, done.stdout, done.stderr)


def start_loadgen(target: str, models: Sequence[str], **flags: Any) -> subprocess.Popen:
    """An open-loop generator that runs until its stdin closes (see stop_loadgen)."""
    argv = loadgen_argv(target, models, **flags)
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_loadgen(process: subprocess.Popen, timeout_s: float = 60.0) -> dict:
    try:
        stdout, stderr = process.communicate(input="", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return _report(process.returncode, stdout, stderr)


def _report(code: int, stdout: str, stderr: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise RuntimeError(f"load generator failed ({code}): {stderr[-2000:]}")
    return json.loads(lines[-1])


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
