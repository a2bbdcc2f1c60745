"""Context mode (a 2-rank Ulysses group over gloo) at the host: results, flags, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.work import JobFailed, JobFinished, StepDone
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.memory import ModelLoadError

# Ulysses moves heads between ranks but computes the same sums as one device: measured
# max abs difference of the 8-bit images is at most 1 level (flux-tiny, 64x64, CPU float32).
CONTEXT_TOLERANCE = 1


def _context(spec, **degrees):
    options = spec.parallelism.model_copy(update={"mode": "context", **degrees})
    # Adapters need the data mode: the context copy leaves the entry's out.
    return spec.model_copy(update={"parallelism": options, "adapters": ()})


def test_ulysses_group_matches_data_mode_and_agrees_on_cancel(
    models_dir, registry_spec, host_for, tmp_path
) -> None:
    reference_host = host_for("flux-tiny")
    jobs = [
        job_for(reference_host.spec, "t", seed=3),
        job_for(reference_host.spec, "u", seed=4, prompt="a dog"),
    ]
    expected = {e.job_id: e.data for e in run(reference_host, jobs) if isinstance(e, JobFinished)}
    spec = _context(registry_spec("flux-tiny"), ulysses=2)
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    helpers = list(host._helpers)
    try:
        assert host.device_ids == ["cpu", "cpu"]
        applied = host.inner.pipeline.transformer._parallel_config.context_parallel_config
        assert (applied.ulysses_degree, applied.ring_degree) == (2, 1)
        events = run(host, jobs)
        for job in jobs:
            (finished,) = of(events, job.job_id, JobFinished)
            difference = np.abs(png_pixels(finished.data) - png_pixels(expected[job.job_id]))
            assert difference.max() <= CONTEXT_TOLERANCE

        # Rank 0 alone sees the cancel; the flags agreed at the next boundary stop "t" on
        # both ranks while "u" runs on, so the group neither deadlocks nor diverges.
        def cancel(event, control) -> None:
            if isinstance(event, StepDone) and event.job_id == "t" and event.step == 1:
                control.cancel(["t"])

        events = run(host, jobs, cancel)
        (failed,) = of(events, "t", JobFailed)
        assert failed.code == "CANCELLED"
        (finished,) = of(events, "u", JobFinished)
        assert np.abs(png_pixels(finished.data) - png_pixels(expected["u"])).max() <= 1

        # 80x48 packs into 15 latent tokens, which two ranks cannot split evenly: the job
        # fails on every rank alike, and the group stays up for the next batch.
        (odd,) = of(run(host, [job_for(spec, "odd", width=80, height=48)]), "odd", JobFailed)
        assert "divisible" in odd.message
        (finished,) = of(run(host, jobs[1:]), "u", JobFinished)
    finally:
        host.close()
    assert not any(process.is_alive() for process in helpers)


def test_context_mode_refuses_a_transformer_without_a_plan(
    models_dir, registry_spec, tmp_path
) -> None:
    spec = _context(registry_spec("sd3-tiny"), ulysses=2)
    with pytest.raises(ModelLoadError) as refused:
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    message = str(refused.value)
    assert "'sd3-tiny'" in message and "parallelism.mode" in message
    assert "SD3Transformer2DModel has none" in message
    # Tensor mode is Flux's only: not a way out for this one.
    assert message.endswith("use parallelism mode data or pipeline"), message


def test_context_mode_refuses_ring_attention_on_cpu(models_dir, registry_spec, tmp_path) -> None:
    spec = _context(registry_spec("flux-tiny"), ring=2)
    with pytest.raises(ModelLoadError, match=r"'flux-tiny' field parallelism\.ring"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
