"""`mediamesh status` and `top` list each model's counts since the scheduler started."""

from __future__ import annotations

from mediamesh.cli.status_table import render
from mediamesh.common.generated.v1 import scheduler_pb2

MS = 1_000_000


def _phase(count: int, ms: float) -> scheduler_pb2.PhaseDuration:
    return scheduler_pb2.PhaseDuration(count=count, ns=round(count * ms * MS))


def _models_table(status: scheduler_pb2.MeshStatus) -> list[str]:
    lines = render(status).splitlines()
    start = lines.index("MODELS")
    return lines[start + 1 : lines.index("", start)]


def test_each_model_reads_as_means_per_job_and_per_batch() -> None:
    flux = scheduler_pb2.ModelStatistics(
        model="flux-tiny",
        inference_count=24,
        execution_count=3,
        success=_phase(24, 120.0),
        fail=_phase(2, 50.0),
        queue=_phase(24, 30.0),
        batch_sizes=[
            # Two batches of 8 and one of 8 more: 24 jobs in 3 batches.
            scheduler_pb2.BatchSizeStatistics(
                batch_size=8,
                compute_input=_phase(3, 2.0),
                compute_infer=_phase(3, 60.0),
                compute_output=_phase(3, 9.0),
            )
        ],
    )
    # A model whose only job failed before it ran.
    echo = scheduler_pb2.ModelStatistics(model="echo", fail=_phase(1, 5.0))
    header, flux_row, echo_row = _models_table(scheduler_pb2.MeshStatus(models=[flux, echo]))
    assert header.split() == [
        "model", "succeeded", "unsuccessful", "batches", "mean", "batch", "latency", "ms",
        "queue", "ms", "input", "ms", "denoise", "ms", "output", "ms",
    ]  # fmt: skip
    assert flux_row.split() == [
        "flux-tiny", "24", "2", "3", "8.0", "120.0", "30.0", "2.0", "60.0", "9.0"
    ]  # fmt: skip
    assert echo_row.split() == ["echo", "0", "1", "0", "-", "-", "-", "-", "-", "-"]


def test_no_model_run_yet_leaves_the_table_out() -> None:
    assert "MODELS" not in render(scheduler_pb2.MeshStatus())


def test_cancelled_and_expired_jobs_are_not_called_failed() -> None:
    """The column is the statistics' `fail`, every end but success (Triton's meaning): named
    "failed", it read as more failures than the JOBS line's FAILED, which counted none."""
    flux = scheduler_pb2.ModelStatistics(
        model="flux-tiny", inference_count=45, fail=_phase(3, 10.0), execution_count=31
    )
    status = scheduler_pb2.MeshStatus(
        models=[flux], jobs_by_state={"CANCELLED": 1, "EXPIRED": 2, "SUCCEEDED": 45}
    )
    header, row = _models_table(status)
    assert "failed" not in header.split()
    assert header.split()[:3] == ["model", "succeeded", "unsuccessful"]
    assert row.split()[:3] == ["flux-tiny", "45", "3"]
