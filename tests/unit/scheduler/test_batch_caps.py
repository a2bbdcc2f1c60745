"""The scheduler learns batch ceilings from out-of-memory splits, per model and shape."""

from __future__ import annotations

from mediamesh.common.generation import GenerationParams
from mediamesh.scheduler.core.batch_caps import BatchCaps
from mediamesh.scheduler.core.scheduler import Accepted

from .fakes import FakeClock, make_core, new_job, worker


def params(width: int = 64) -> GenerationParams:
    return GenerationParams(prompt="p", width=width, height=64)


def test_ceilings_only_go_down_and_stay_per_shape() -> None:
    caps = BatchCaps()
    assert caps.limit("m", params(), 8) == 8
    assert caps.learn("m", params(), 4)
    assert not caps.learn("m", params(), 6)  # a higher ceiling teaches nothing
    assert caps.learn("m", params(), 2)
    assert caps.limit("m", params(), 8) == 2
    assert caps.limit("m", params(), 1) == 1
    assert caps.limit("m", params(width=128), 8) == 8
    assert caps.limit("other", params(), 8) == 8


def finish(core, dispatch) -> None:
    for job in dispatch.jobs:
        core.job_succeeded(job.job_id, dispatch.batch_id)
    core.batch_ended(dispatch.batch_id)


def test_dispatch_forms_batches_no_larger_than_the_learned_ceiling() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    for seed in range(9):
        assert isinstance(core.submit(new_job(seed=seed)), Accepted)
    [first] = core.schedule()
    assert len(first.jobs) == 4  # flux-tiny's max_batch
    # The worker split that batch after running out of memory: halves of 2.
    assert core.batch_fitted(first.jobs[0].job_id, 2)
    assert not core.batch_fitted(first.jobs[1].job_id, 2)
    finish(core, first)
    sizes = []
    for _ in range(3):
        clock.advance(1)  # past the batch window, for the last partial batch
        [batch] = core.schedule()
        sizes.append(len(batch.jobs))
        finish(core, batch)
    assert sizes == [2, 2, 1]
    # Another shape of the same model keeps the registry's max_batch.
    for seed in range(4):
        assert isinstance(core.submit(new_job(seed=100 + seed, width=128)), Accepted)
    [wide] = core.schedule()
    assert wide.jobs[0].params.width == 128 and len(wide.jobs) == 4
