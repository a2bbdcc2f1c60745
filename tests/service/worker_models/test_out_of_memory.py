"""Out-of-memory split and retry on flux-tiny: a test hook raises torch's own
OutOfMemoryError (or a CPU allocator's RuntimeError) for batches above a size."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.work import JobFailed, JobFinished, JobNotice, JobParams
from mediamesh.worker.core import call_hooks

MODEL = "flux-tiny"


def fail_above(limit: int, error: Callable[[], Exception]) -> Callable[[list[JobParams]], None]:
    def hook(jobs: list[JobParams]) -> None:
        sizes.append(len(jobs))
        if len(jobs) > limit:
            raise error()

    sizes: list[int] = []
    hook.sizes = sizes  # type: ignore[attr-defined]
    return hook


@pytest.fixture
def flux(host_for) -> Iterator:
    yield host_for(MODEL)
    call_hooks.remove(MODEL)


def cuda_oom() -> Exception:
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def cpu_oom() -> Exception:
    return RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory"
    )


@pytest.mark.parametrize("error", [cuda_oom, cpu_oom])
def test_a_batch_that_does_not_fit_runs_in_halves(flux, error) -> None:
    jobs = [job_for(flux.spec, f"j{i}", seed=20 + i, steps=2) for i in range(3)]
    hook = fail_above(1, error)
    call_hooks.install(MODEL, hook)
    events = run(flux, jobs)
    call_hooks.remove(MODEL)
    # 3 -> halves of 2 and 1; the 2 -> halves of 1 and 1.
    assert hook.sizes == [3, 2, 1, 1, 1]
    for job in jobs:
        terminal = [e for e in of(events, job.job_id) if isinstance(e, JobFinished | JobFailed)]
        assert len(terminal) == 1 and isinstance(terminal[0], JobFinished), terminal
        # The same pixels as the job run alone: nothing of the failed attempt leaks in.
        (alone,) = of(run(flux, [job]), job.job_id, JobFinished)
        assert np.array_equal(png_pixels(terminal[0].data), png_pixels(alone.data))
    notices = [e for e in events if isinstance(e, JobNotice) and e.kind == "oom_split"]
    ceilings = {(e.job_id, e.fitted_batch) for e in notices}
    assert ceilings == {("j0", 2), ("j1", 2), ("j2", 2), ("j0", 1), ("j1", 1)}


def test_a_job_that_cannot_fit_alone_fails_resource_exhausted(flux) -> None:
    jobs = [job_for(flux.spec, f"k{i}", seed=i, steps=2) for i in range(2)]
    call_hooks.install(MODEL, fail_above(0, cuda_oom))
    events = run(flux, jobs)
    for job in jobs:
        (failed,) = of(events, job.job_id, JobFailed)
        assert failed.code == "RESOURCE_EXHAUSTED"
        assert "model 'flux-tiny' cannot fit one job of 64x64 (2 steps)" in failed.message
        assert not of(events, job.job_id, JobFinished)


def test_other_errors_are_not_retried(flux) -> None:
    hook = fail_above(0, lambda: RuntimeError("shape mismatch"))
    call_hooks.install(MODEL, hook)
    events = run(flux, [job_for(flux.spec, "x", steps=2), job_for(flux.spec, "y", steps=2)])
    assert hook.sizes == [2]
    assert {e.code for e in events if isinstance(e, JobFailed)} == {"INTERNAL"}
