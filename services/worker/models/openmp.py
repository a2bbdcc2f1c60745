"""Free a thread's OpenMP helper threads once it stops computing.

Each batch of a worker runs on a thread of its own (core/gate.py), and the thread that loads
the models and the one that warms them up are others again. In torch's CPU builds the intra-op
pool is GNU OpenMP's (libgomp), which gives every thread that runs a parallel op a team of
helpers of its own, kept until that thread exits. Once the helpers of all those teams
outnumber the host's cores, libgomp cuts every helper's spin-wait to almost nothing: helpers
then sleep between ops and are woken for the next, and a small model's batch, thousands of
short ops, slows down. Measured on two cores with flux-tiny at batch 16 on 2 threads (README,
Performance): batches taking turns on four threads ran at 151-162 img/s and 1.13 cores,
against 202-248 img/s and 1.8 cores on one thread; freeing each thread's team as it gave the
device up brought them back to 212-222 img/s and 1.78 cores.

So a thread frees its team when it gives the device up, and at most one team lives at a time.
The next parallel op on that thread builds a new one (a thread start, once per batch).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

log = logging.getLogger(__name__)

# omp_pause_resource_kind_t's omp_pause_soft (OpenMP 5.0); libgomp frees the calling
# thread's team for either kind.
_OMP_PAUSE_SOFT = 1
_GNU_OPENMP = "libgomp"

P = ParamSpec("P")
T = TypeVar("T")


def team_releaser() -> Callable[[], None] | None:
    """A function that frees the calling thread's OpenMP team, or None where there is none to
    free: torch without OpenMP, or with another OpenMP runtime (LLVM's and Intel's runtimes
    keep no team per thread to throttle)."""
    import torch

    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    library = torch_gnu_openmp(Path(torch.__file__).parent, _loaded_libraries(_GNU_OPENMP))
    if library is None:
        return None
    pause = getattr(ctypes.CDLL(str(library)), "omp_pause_resource_all", None)
    if pause is None:
        log.info("%s has no omp_pause_resource_all (before OpenMP 5.0): teams are kept", library)
        return None
    pause.argtypes = [ctypes.c_int]
    pause.restype = ctypes.c_int
    log.info("each batch thread frees its OpenMP team as it leaves the device (%s)", library)

    def release() -> None:
        # Fails (non-zero) only inside a parallel region, which a batch thread is never in.
        pause(_OMP_PAUSE_SOFT)

    return release


def torch_gnu_openmp(torch_dir: Path, loaded: list[Path]) -> Path | None:
    """Which of the loaded libgomp copies is torch's. Wheels bundle their own (torch's in its
    lib folder, sentencepiece's beside it), and freeing a team in another copy frees nothing
    of torch's: the copy inside `torch_dir` if any, else the only one, else None."""
    inside = [path for path in loaded if path.is_relative_to(torch_dir)]
    if inside:
        return inside[0]
    if len(loaded) == 1:
        return loaded[0]
    if loaded:
        log.info("several libgomp copies are loaded and none is torch's own: teams are kept")
    return None


def then_released(
    release: Callable[[], None] | None, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """`work(...)`, then the calling thread's team freed: for the threads that load and warm
    the models, which compute once and then wait in asyncio's pool for other work."""
    try:
        return work(*args, **kwargs)
    finally:
        if release is not None:
            release()


def _loaded_libraries(prefix: str, maps: Path = Path("/proc/self/maps")) -> list[Path]:
    """The files of the shared libraries named `prefix`* that this process has loaded, in
    load order; none without /proc to ask."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
        if len(fields) == 6 and Path(fields[5]).name.startswith(prefix):
            path = Path(fields[5])
            if path not in found:
                found.append(path)
    return found
