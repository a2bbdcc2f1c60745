"""Simulator speed of this checkout's scheduler core against a baseline checkout's.

    git worktree add /tmp/core-base <commit>
    .venv/bin/python bench/core_speed.py /tmp/core-base --jobs 1000000 --runs 2

Runs the shipped fleet-1000 scenario alternately on the baseline and on this checkout (each
run a fresh process), or with --paired both at the same time, so that on a shared machine
both see the same load; writes bench/results/core_speed.json: jobs per wall-clock second of
the event loop, jobs per CPU second (steadier under load), and whether both produced the
same results (the result JSON minus wall times).

The baseline is imported through a folder holding `mediamesh` -> BASELINE/services put on
PYTHONPATH: path entries are searched before the editable install's finder, which
setuptools appends to `sys.meta_path`. Each run checks which copy it imported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _one(jobs: int) -> None:
    """In a child process: run the scenario once with whichever mediamesh imports."""
    import mediamesh
    from mediamesh.sim.report import write_json
    from mediamesh.sim.scenario import load_scenario
    from mediamesh.sim.simulation import build

    simulation = build(load_scenario("fleet-1000"), jobs=jobs)
    cpu_started = time.process_time()
    result = simulation.run()
    cpu_s = time.process_time() - cpu_started
    with tempfile.TemporaryDirectory() as folder:
        data = write_json(result, Path(folder) / "result.json")
    for timing in ("wall_seconds", "jobs_per_wall_second"):
        data.pop(timing, None)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    line = {
        "imported": mediamesh.__file__,
        "wall_s": result.wall_seconds,
        "cpu_s": cpu_s,
        "jobs_per_s": result.jobs / result.wall_seconds,
        "jobs_per_cpu_s": result.jobs / cpu_s,
        "results_sha256": digest,
    }
    print(json.dumps(line))


def _start(jobs: int, baseline_path: Path | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if baseline_path is not None:
        env["PYTHONPATH"] = str(baseline_path)
    return subprocess.Popen(
        [sys.executable, __file__, "--one", str(jobs)],
        env=env,
        cwd=tempfile.gettempdir(),
        stdout=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], baseline_path: Path | None) -> dict:
    output, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"a run failed with exit status {process.returncode}")
    line = json.loads(output.strip().splitlines()[-1])
    expected = (baseline_path / "mediamesh") if baseline_path else (ROOT / "services")
    imported = Path(line["imported"]).parent
    if imported != expected:
        raise SystemExit(f"imported {imported}, expected {expected}")
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, nargs="?", help="checkout of the baseline commit")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each, alternating")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="run each baseline and new run at the same time, so both see the same load",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/core_speed.json")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        _one(args.one)
        return 0
    if args.baseline is None:
        parser.error("the baseline checkout is required")
    with tempfile.TemporaryDirectory() as folder:
        shim = Path(folder)
        (shim / "mediamesh").symlink_to(args.baseline.resolve() / "services")
        runs: dict[str, list[dict]] = {"baseline": [], "new": []}
        both: tuple[tuple[str, Path | None], ...] = (("baseline", shim), ("new", None))
        for run in range(args.runs):
            if args.paired:
                started = [(name, path, _start(args.jobs, path)) for name, path in both]
                finished = [(name, _finish(process, path)) for name, path, process in started]
            else:
                finished = [(name, _finish(_start(args.jobs, path), path)) for name, path in both]
            for name, line in finished:
                runs[name].append(line)
                print(f"{name} run {run + 1}: {line['jobs_per_s']:,.0f} jobs/s", flush=True)
    base = statistics.mean(r["jobs_per_s"] for r in runs["baseline"])
    new = statistics.mean(r["jobs_per_s"] for r in runs["new"])
    base_cpu = statistics.mean(r["jobs_per_cpu_s"] for r in runs["baseline"])
    new_cpu = statistics.mean(r["jobs_per_cpu_s"] for r in runs["new"])
    digests = {r["results_sha256"] for lines in runs.values() for r in lines}
    report = {
        "baseline_jobs_per_s": round(base, 1),
        "new_jobs_per_s": round(new, 1),
        "ratio": round(new / base, 3),
        "baseline_jobs_per_cpu_s": round(base_cpu, 1),
        "new_jobs_per_cpu_s": round(new_cpu, 1),
        "cpu_ratio": round(new_cpu / base_cpu, 3),
        "identical_results": len(digests) == 1,
        "runs": {
            name: [
                {k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()} for r in lines
            ]
            for name, lines in runs.items()
        },
        "mode": "paired (each pair at once)" if args.paired else "alternating",
        "command": f".venv/bin/python bench/core_speed.py {args.baseline} "
        f"--jobs {args.jobs} --runs {args.runs}" + (" --paired" if args.paired else ""),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
