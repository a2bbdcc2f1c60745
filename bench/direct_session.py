"""One `python -m bench.direct --serve` process for a benchmark's whole run.

The benchmark measures direct levels between its mesh levels; a process per level would pay
a torch start and a model load each time (seconds, more than a level of flux-tiny), and a
process kept for the run pays them once. It waits, blocked on its stdin, while the mesh runs.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from bench.launcher import ROOT


class DirectSessionError(RuntimeError):
    """The direct process failed a level, went away or took too long."""


class DirectSession:
    def __init__(self, models_dir: Path, level_timeout_s: float = 900.0) -> None:
        self.models_dir = models_dir
        self.level_timeout_s = level_timeout_s
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> DirectSession:
        # A file, not a pipe: nobody reads stderr while the mesh runs, and a full pipe
        # would stop the process in the middle of a level.
        self._stderr = tempfile.TemporaryFile("w+", prefix="mediamesh-direct-")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.direct", "--serve", "--models-dir", str(self.models_dir)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        process = self._process
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()

    def measure(
        self,
        model: str,
        threads: int,
        batch_sizes: list[int] | tuple[int, ...],
        requests: int,
        min_batches: int = 1,
        steps: int = 0,
    ) -> dict[str, Any]:
        """One model's report (`bench.direct`'s shape) for these batch sizes."""
        command = {
            "model": model,
            "threads": threads,
            "batch_sizes": list(batch_sizes),
            "requests": requests,
            "min_batches": min_batches,
            "steps": steps,
        }
        reply = json.loads(self._exchange(json.dumps(command)))
        if "error" in reply:
            raise DirectSessionError(f"direct level {command} failed: {reply['error']}")
        return dict(reply)

    def _exchange(self, line: str) -> str:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise DirectSessionError("the direct session is not started")
        try:
            process.stdin.write(line + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            raise DirectSessionError(f"the direct process is gone: {self._stderr_tail()}") from None
        deadline = time.monotonic() + self.level_timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DirectSessionError(f"no answer in {self.level_timeout_s:.0f} s to {line}")
                if selector.select(timeout=min(left, 1.0)):
                    # The server writes whole lines and flushes each, so this returns one.
                    answer = process.stdout.readline()
                    if answer.startswith("{"):
                        return answer
                    if not answer:
                        raise DirectSessionError(
                            f"the direct process ended ({process.wait()}): {self._stderr_tail()}"
                        )
                    # Anything else is a library printing to stdout; not a reply.

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:]
