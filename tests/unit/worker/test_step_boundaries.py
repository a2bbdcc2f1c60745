"""Progress counts the steps a job asked for, not the loop iterations a scheduler runs."""

from __future__ import annotations

from dataclasses import dataclass

from mediamesh.worker.models.step_boundaries import StepBoundaries


@dataclass
class FakeScheduler:
    timesteps: list[int]
    order: int = 1


@dataclass
class FakePipeline:
    _num_timesteps: int


def _reported(scheduler: FakeScheduler, steps: int, loop_length: int) -> list[int]:
    boundaries = StepBoundaries(scheduler, steps)
    pipeline = FakePipeline(loop_length)
    found = [boundaries.completed(i, pipeline) for i in range(loop_length)]
    return [step for step in found if step is not None]


def test_one_iteration_per_step_reports_each() -> None:
    assert _reported(FakeScheduler(list(range(4))), 4, 4) == [0, 1, 2, 3]


def test_pndm_warmup_iterations_are_not_steps() -> None:
    # PNDM with skip_prk_steps: one extra timestep; without: eight Runge-Kutta ones.
    assert _reported(FakeScheduler(list(range(5))), 4, 5) == [0, 1, 2, 3]
    assert _reported(FakeScheduler(list(range(12))), 4, 12) == [0, 1, 2, 3]


def test_second_order_solvers_report_once_per_step() -> None:
    # Heun: 2N - 1 model calls for N steps.
    assert _reported(FakeScheduler(list(range(7)), order=2), 4, 7) == [0, 1, 2, 3]


def test_a_resumed_loop_uses_its_own_length_not_the_restored_schedule() -> None:
    # Resuming at step 2 of 4: the loop runs 2 iterations while the scheduler holds all 4.
    assert _reported(FakeScheduler(list(range(4))), 2, 2) == [0, 1]


def test_legacy_callbacks_are_already_step_ends() -> None:
    boundaries = StepBoundaries(FakeScheduler(list(range(5))), 4)
    # PNDM's legacy callback index starts past the warm-up: 1, 2, 3, 4.
    assert [boundaries.completed(i) for i in (1, 2, 3, 4)] == [0, 1, 2, 3]
