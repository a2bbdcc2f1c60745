"""Where the mesh's CPU goes: an echo mesh under closed-loop load, CPU per request per process.

`python -m bench.profile_mesh [--concurrency 64] [--requests 4000] [--py-spy DIR]`
`python -m bench.profile_mesh --model flux-tiny --workers 1 --concurrency 1 --py-spy DIR --gil`

CPU time comes from psutil (user + system, every thread) sampled around the measured level,
so the figures are milliseconds of CPU per completed request. With `--py-spy DIR` each mesh
process is also recorded by py-spy (a speedscope file per process) while the load runs: the
profile the README's Performance section quotes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

import psutil

from bench.common import level_from_load, loadgen_argv
from bench.launcher import ROOT, process_cpu_seconds, running_mesh


def _thread_seconds(process: psutil.Process) -> dict[str, float]:
    """CPU seconds per thread name (threads of one name summed: a pool's workers)."""
    seconds: dict[str, float] = {}
    for thread in process.threads():
        try:
            comm = Path(f"/proc/{process.pid}/task/{thread.id}/comm").read_text().strip()
        except OSError:
            continue
        name = comm.rstrip("0123456789_-") or comm
        seconds[name] = seconds.get(name, 0.0) + thread.user_time + thread.system_time
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--api", default="native", choices=["native", "kserve"])
    parser.add_argument("--model", default="echo", help="a model of the shipped registry")
    parser.add_argument("--workers", type=int, default=2, help="workers of 1 torch thread each")
    parser.add_argument("--py-spy", type=Path, default=None, help="record py-spy profiles here")
    parser.add_argument("--native", action="store_true", help="py-spy: C frames too")
    parser.add_argument(
        "--gil", action="store_true", help="py-spy: sample the thread holding the GIL, idle too"
    )
    parser.add_argument("--strace", type=Path, default=None, help="syscall counts here")
    parser.add_argument(
        "--in-store-max-bytes", type=int, default=None, help="scheduler.artifacts setting"
    )
    args = parser.parse_args()
    scheduler = {"artifacts": {"in_store_max_bytes": args.in_store_max_bytes}}
    workers = [{"models": [args.model], "torch_threads": 1} for _ in range(args.workers)]
    with running_mesh(workers, scheduler) as mesh:
        roles = mesh.processes()
        argv = loadgen_argv(
            mesh.gateway,
            [args.model],
            api=args.api,
            concurrency=args.concurrency,
            requests=args.requests,
            warmup=4 * args.concurrency,
            timeout=60,
        )
        loadgen = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        roles["loadgen"] = psutil.Process(loadgen.pid)
        time.sleep(1.5)  # past the warm-up, most of it
        before = {name: process_cpu_seconds(p) for name, p in roles.items()}
        threads_before = {name: _thread_seconds(p) for name, p in roles.items()}
        recorders = []
        if args.py_spy is not None:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            py_spy = shutil.which("py-spy")
            if py_spy is None:
                raise SystemExit("py-spy is not installed (pip install py-spy)")
            for name, process in roles.items():
                out = args.py_spy / f"{name}.speedscope.json"
                recorders.append(
                    subprocess.Popen(
                        [py_spy, "record", "--pid", str(process.pid), "--format", "speedscope"]
                        + ["--duration", "4", "--rate", "200", "-o", str(out)]
                        + (["--native"] if args.native else ["--nonblocking"])
                        + (["--gil", "--idle"] if args.gil else []),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        if args.strace is not None:
            args.strace.mkdir(parents=True, exist_ok=True)
            for name, process in roles.items():
                recorders.append(
                    subprocess.Popen(
                        [
                            *("timeout", "-s", "INT", "4", "strace", "-c", "-f"),
                            *("-p", str(process.pid), "-o", str(args.strace / f"{name}.txt")),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        started = time.monotonic()
        time.sleep(4.0)
        after = {name: process_cpu_seconds(p) for name, p in roles.items()}
        threads_after = {name: _thread_seconds(p) for name, p in roles.items()}
        elapsed = time.monotonic() - started
        stdout, _ = loadgen.communicate(timeout=120)
        for recorder in recorders:
            recorder.wait(30)
    report = level_from_load(
        json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    )
    rate = report["throughput_rps"]
    completed = rate * elapsed
    per_request = {name: 1000 * (after[name] - before[name]) / completed for name in roles}
    per_thread = {
        role: {
            thread: round(1000 * (seconds - threads_before[role].get(thread, 0.0)) / completed, 3)
            for thread, seconds in threads_after[role].items()
            if seconds - threads_before[role].get(thread, 0.0) > 0
        }
        for role in roles
    }
    print(
        json.dumps(
            {
                "throughput_rps": rate,
                "p50_ms": report.get("p50_ms"),
                "cpu_ms_per_request": {k: round(v, 3) for k, v in per_request.items()},
                "cpu_ms_per_request_total": round(sum(per_request.values()), 3),
                "cpu_ms_per_request_by_thread": per_thread,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
