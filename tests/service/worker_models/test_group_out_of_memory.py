"""Out-of-memory split in a context-parallel group (2 Ulysses ranks over gloo): every rank
splits together, whether all ran out of memory or one rank alone did after the others
finished, and a failure on one rank fails the batch on all without breaking the group."""

from __future__ import annotations

import numpy as np
from test_context_host import CONTEXT_TOLERANCE, _context
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.work import JobFailed, JobFinished, JobNotice
from mediamesh.worker.core import call_hooks
from mediamesh.worker.hosting import load_host

MODEL = "flux-tiny"


def test_a_group_splits_together_and_fails_together(
    models_dir, registry_spec, host_for, tmp_path
) -> None:
    reference = host_for(MODEL)
    spec = _context(registry_spec(MODEL), ulysses=2)
    batches = {
        prefix: [job_for(spec, f"{prefix}{i}", seed=30 + i, steps=2) for i in range(3)]
        for prefix in ("late", "both")
    }
    expected = {
        e.job_id: e.data
        for jobs in batches.values()
        for e in run(reference, jobs)
        if isinstance(e, JobFinished)
    }
    # Rank 1 runs out of memory after its call (as in a VAE decode that fits on rank 0
    # alone) for "late" batches above 1, and fails otherwise for "broken" batches. For
    # "both" batches above 1 it runs out of memory before the call, as rank 0 does.
    late = call_hooks.FailCalls({"late": (1, True), "broken": (0, False)})
    call_hooks.install_on_helper_ranks(MODEL, late, after=True)
    call_hooks.install_on_helper_ranks(MODEL, call_hooks.FailCalls({"both": (1, True)}))
    try:
        host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    finally:
        call_hooks.remove(MODEL)
    # Rank 0's own hook records the size of every call it makes.
    rank0_hook = call_hooks.FailCalls({"both": (1, True), "late": (99, True)})
    call_hooks.install(MODEL, rank0_hook)
    try:
        for prefix, jobs in batches.items():
            rank0_hook.sizes.clear()
            events = run(host, jobs)
            # 3 -> halves of 2 and 1; the 2 -> 1 and 1, on both ranks alike.
            assert rank0_hook.sizes == [3, 2, 1, 1, 1], prefix
            for job in jobs:
                (finished,) = of(events, job.job_id, JobFinished)
                alone = png_pixels(expected[job.job_id])
                difference = np.abs(png_pixels(finished.data) - alone)
                assert difference.max() <= CONTEXT_TOLERANCE
                assert not of(events, job.job_id, JobFailed)
            notices = {
                (e.job_id, e.fitted_batch)
                for e in events
                if isinstance(e, JobNotice) and e.kind == "oom_split"
            }
            assert {n for _, n in notices} == {2, 1}, prefix

        broken = [job_for(spec, f"broken{i}", seed=i, steps=2) for i in range(2)]
        events = run(host, broken)
        for job in broken:
            (failed,) = of(events, job.job_id, JobFailed)
            assert failed.code == "INTERNAL"
            assert "another rank of the group failed" in failed.message
        # The group is still whole: the next batch runs on both ranks.
        (finished,) = of(run(host, [job_for(spec, "after", seed=5, steps=2)]), "after", JobFinished)
        assert finished.data
    finally:
        call_hooks.remove(MODEL)
        host.close()
