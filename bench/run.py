"""Benchmarks of a real mesh on this machine: `python -m bench.run all|NAME [--smoke]`.

Full runs write bench/results/<name>.json and <name>.png; `--smoke` runs the same code
with tiny request counts into bench/results/smoke/ (what the e2e test checks).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from bench.common import RESULTS_DIR, SMOKE_DIR, Options, log
from bench.launcher import MeshSession
from bench.priority import SCHEDULER as PRIORITY_SCHEDULER
from bench.records import DirtyTree, compare_with_committed, require_clean_tree

# Recovery kills processes, so it goes last when the smoke run shares one mesh.
BENCHMARKS = ("overhead", "batching", "priority", "caching", "previews", "recovery")
SMOKE_MODELS = ["echo", "flux-tiny", "flux-small", "wan-tiny"]
SMOKE_MESH = (
    [{"models": SMOKE_MODELS, "torch_threads": 1} for _ in range(2)],
    PRIORITY_SCHEDULER,
)


def run_one(name: str, options: Options) -> Path:
    module = importlib.import_module(f"bench.{name}")
    started = time.monotonic()
    result = module.run(options)
    path = result.save()
    log(f"{name}: {path} ({time.monotonic() - started:.0f} s)")
    if not options.smoke:
        for line in compare_with_committed(name, path):
            log(line)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("benchmark", choices=["all", *BENCHMARKS])
    parser.add_argument("--smoke", action="store_true", help="seconds-long run of the same code")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="batching: torch threads of the worker and of the direct run (default 1)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run on a tree with uncommitted changes (development; results say git.dirty)",
    )
    args = parser.parse_args(argv)
    out_dir = args.out or (SMOKE_DIR if args.smoke else RESULTS_DIR)
    if not args.smoke:
        # A smoke run checks code paths, not figures: it may run on any tree.
        try:
            require_clean_tree(args.allow_dirty, out_dir)
        except DirtyTree as exc:
            log(str(exc))
            return 2
    _interrupt_on_signals()
    meshes = MeshSession(SMOKE_MESH if args.smoke else None)
    options = Options(
        smoke=args.smoke, out_dir=out_dir, meshes=meshes, torch_threads=args.torch_threads
    )
    names = BENCHMARKS if args.benchmark == "all" else (args.benchmark,)
    failed: list[str] = []
    started = time.monotonic()
    try:
        for name in names:
            try:
                run_one(name, options)
            except Exception as exc:
                # One broken benchmark must not cost the others' results.
                log(f"{name} FAILED: {exc!r}")
                failed.append(name)
    finally:
        meshes.close()
    log(f"done in {time.monotonic() - started:.0f} s; results in {out_dir}")
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    return 0


def _interrupt_on_signals() -> None:
    """Ctrl-C and SIGTERM unwind through the context managers that stop every mesh.

    A shell starting us in the background ignores SIGINT; take it back."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":
    sys.exit(main())
