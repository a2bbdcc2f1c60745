"""The models' inference statistics: a batch's phases from its events, and the counts per
tenant and for the whole mesh."""

from __future__ import annotations

import pytest

from mediamesh.scheduler.core.model_statistics import (
    BatchTimer,
    BatchTimes,
    Duration,
    RanJob,
    StatisticsLedger,
)

NS = 1_000_000_000


def test_a_batch_is_split_into_input_denoising_and_output():
    timer = BatchTimer(sent_at=100.0)
    # Two jobs report each of three 0.5 s steps; the first step started at 100.25.
    for step, at in ((1, 100.75), (2, 101.25), (3, 101.75)):
        timer.step(step, 0.5, at)
        timer.step(step, 0.5, at + 0.001)
    timer.result("first", 102.0)
    timer.result("second", 102.1)
    times = timer.times()
    assert times is not None
    assert times.input_s == pytest.approx(0.25)
    # Each step once, though every job reported it.
    assert times.infer_s == pytest.approx(1.5)
    # The batch's output ends with its last result, each job's with its own.
    assert times.output_s == pytest.approx(102.1 - 101.751)
    assert timer.output_of("first") == pytest.approx(102.0 - 101.751)
    assert timer.output_of("third") is None


def test_reports_that_arrive_together_do_not_stretch_the_input_over_the_steps():
    # Step 1 (2.5 ms) was reported only with step 2 (1.6 ms): its own report bounds the
    # start at 13.6 ms, step 2's at 12.3 ms, and only the tighter one leaves the input and
    # the steps within the time up to the last report.
    timer = BatchTimer(sent_at=0.0)
    timer.step(1, 0.0025, 0.0161)
    timer.step(2, 0.0016, 0.0164)
    times = timer.times()
    assert times is not None
    assert times.input_s == pytest.approx(0.0123)
    assert times.input_s + times.infer_s == pytest.approx(0.0164)


def test_a_paused_batchs_wait_is_not_denoising():
    timer = BatchTimer(sent_at=0.0)
    timer.step(1, 0.1, 0.2)
    # Paused for 5 s for an urgent batch, then the second step.
    timer.step(2, 0.1, 5.3)
    timer.result("job", 5.4)
    times = timer.times()
    assert times is not None and times.infer_s == pytest.approx(0.2)


def test_a_batch_that_reached_nothing_is_not_counted_and_one_without_steps_is_all_model():
    assert BatchTimer(sent_at=0.0).times() is None
    stepless = BatchTimer(sent_at=1.0)
    stepless.result("echo", 1.004)
    assert stepless.times() == BatchTimes(0.0, pytest.approx(0.004), 0.0)
    assert stepless.output_of("echo") == 0.0
    # Stopped after a step, before any result (a pause that handed the jobs back).
    cut = BatchTimer(sent_at=0.0)
    cut.step(1, 0.1, 0.3)
    assert cut.times() == BatchTimes(pytest.approx(0.2), pytest.approx(0.1), 0.0)


def test_counts_and_durations_per_job_per_batch_and_per_batch_size():
    ledger = StatisticsLedger(wall_clock=lambda: 1_700_000_000.5)
    times = BatchTimes(input_s=0.01, infer_s=0.2, output_s=0.03)
    jobs = [RanJob("acme", 0.5, 0.02), RanJob("acme", 0.25, 0.03), RanJob("acme", 0.0, None)]
    ledger.batch_ran("flux-tiny", jobs, times)
    ledger.batch_ran("flux-tiny", [RanJob("acme", 1.0, 0.03)], times)
    ledger.job_ended("acme", "flux-tiny", True, 1.5)
    ledger.job_ended("acme", "flux-tiny", False, 2.0)

    stats = ledger.statistics("flux-tiny", "acme")
    assert stats.last_inference_ms == 1_700_000_000_500
    assert (stats.inference_count, stats.execution_count) == (1, 2)
    assert stats.success == Duration(1, int(1.5 * NS))
    assert stats.fail == Duration(1, 2 * NS)
    assert stats.queue == Duration(4, int(1.75 * NS))
    assert stats.compute_input == Duration(4, 4 * int(0.01 * NS))
    assert stats.compute_infer == Duration(4, 4 * int(0.2 * NS))
    # Each result's own output phase; the job without a result has none.
    assert stats.compute_output == Duration(3, int(0.08 * NS))
    assert sorted(stats.batch_sizes) == [1, 3]
    assert stats.batch_sizes[3].compute_infer == Duration(1, int(0.2 * NS))
    assert stats.batch_sizes[1].compute_output == Duration(1, int(0.03 * NS))


def test_a_tenant_sees_its_own_jobs_and_the_mesh_counts_a_mixed_batch_once():
    ledger = StatisticsLedger(wall_clock=lambda: 0.0)
    times = BatchTimes(0.0, 1.0, 0.0)
    ledger.batch_ran("echo", [RanJob("a", 0.1, 0.0), RanJob("b", 0.2, 0.0)], times)
    ledger.job_ended("a", "echo", True, 1.0)
    ledger.job_ended("b", "echo", True, 1.0)

    mesh, a, b = (ledger.statistics("echo", t) for t in (None, "a", "b"))
    assert mesh.execution_count == 1 and mesh.batch_sizes[2].compute_infer.count == 1
    assert mesh.inference_count == 2 and mesh.queue.count == 2
    # Each tenant took part in the one execution, a batch of two.
    for own, wait in ((a, 0.1), (b, 0.2)):
        assert own.execution_count == 1 and list(own.batch_sizes) == [2]
        assert own.inference_count == 1
        assert own.queue == Duration(1, round(wait * NS))
    assert ledger.statistics("echo", "c") == ledger.statistics("flux-tiny", None)
    assert ledger.statistics("echo", "c").execution_count == 0
