"""A refusal for lack of time relies on the least a job can take, which the steps measured
so far bound; the share-based estimate, after small images, prices a large one far too high."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.common.registry import load_registry
from mediamesh.scheduler.core.cost import CostModel
from mediamesh.scheduler.core.jobs import GenerationParams
from mediamesh.scheduler.core.scheduler import Accepted, Rejection

from .fakes import FakeClock, make_core, new_job, worker

SPECS = load_registry().models
FLUX = next(spec for spec in SPECS if spec.name == "flux-tiny")
OVERHEAD = FLUX.cost.overhead_s


def params(side: int, steps: int = 50) -> GenerationParams:
    return GenerationParams(prompt="x", steps=steps, seed=1, width=side, height=side)


def test_a_large_job_after_small_ones_is_bounded_by_the_largest_step_measured() -> None:
    cost = CostModel(SPECS)
    for _ in range(30):
        # What a CPU worker measured for 64x64 flux-tiny steps, one job at a time.
        cost.observe_step("flux-tiny", params(64), 1, 0.0035)
    large = params(512)
    # The share model scales 3.5 ms by 64 times the pixels: 11 s for 50 steps.
    assert cost.estimate("flux-tiny", large) == pytest.approx(OVERHEAD + 50 * 0.0035 * 64)
    # At the least, each step takes what the largest measured one did.
    assert cost.least_estimate("flux-tiny", large) == pytest.approx(OVERHEAD + 50 * 0.0035)
    # A smaller job than any measured takes at least its proportional share.
    assert cost.least_estimate("flux-tiny", params(32)) == pytest.approx(OVERHEAD + 50 * 0.0035 / 4)


def test_the_least_follows_every_measured_size_and_batches_count_as_their_work() -> None:
    cost = CostModel(SPECS)
    cost.observe_step("flux-tiny", params(64), 16, 0.020)  # 16 x 64x64 = one 256x256
    cost.observe_step("flux-tiny", params(512), 1, 0.030)
    assert cost.least_estimate("flux-tiny", params(256, steps=1)) == pytest.approx(OVERHEAD + 0.020)
    # Between two sizes: at least the smaller's step, and the larger's share.
    between = cost.least_estimate("flux-tiny", params(384, steps=1)) - OVERHEAD
    assert between == pytest.approx(max(0.020, 0.030 * 384**2 / 512**2))
    assert cost.least_estimate("flux-tiny", params(1024, steps=1)) == pytest.approx(
        OVERHEAD + 0.030
    )


def test_before_any_step_the_least_is_the_registry_prior() -> None:
    cost = CostModel(SPECS)
    assert cost.least_estimate("flux-tiny", params(64)) == cost.estimate("flux-tiny", params(64))


def test_sizes_kept_are_bounded_and_the_stalest_gives_way() -> None:
    cost = CostModel(SPECS)
    # 30 sizes, each 1.44 times the pixels of the one before: none counts as another's.
    sides = [round(16 * 1.2**k) for k in range(30)]
    for side in sides:
        cost.observe_step("flux-tiny", params(side), 1, side / 1000)
    assert len(cost._calibration["flux-tiny"].sizes) == 24
    # The six measured first, the smallest, no longer bound the least.
    smallest_kept = sides[6]
    assert cost.least_estimate("flux-tiny", params(16, steps=1)) == pytest.approx(
        OVERHEAD + smallest_kept / 1000 * 16**2 / smallest_kept**2
    )


def test_a_timeout_the_job_can_meet_is_accepted_after_small_jobs() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for _ in range(30):
        core.cost.observe_step("flux-tiny", params(64), 1, 0.0035)
    # 512x64: eight times the pixels, priced 1.45 s by the share model, runs in about 0.2.
    wide = GenerationParams(prompt="p", steps=50, seed=1, width=512, height=64)
    assert core.cost.estimate("flux-tiny", wide) > 1.0
    outcome = core.submit(new_job(steps=50, width=512, deadline=clock.now + 1.0))
    assert isinstance(outcome, Accepted), outcome
    # Less than its least is still refused, naming that least.
    outcome = core.submit(new_job(steps=50, width=512, deadline=clock.now + 0.1))
    assert isinstance(outcome, Rejection) and outcome.code is StatusCode.DEADLINE_EXCEEDED
    assert f"needs at least {OVERHEAD + 50 * 0.0035:.3f} s" in outcome.message
