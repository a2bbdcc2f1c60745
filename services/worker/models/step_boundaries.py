"""Which callbacks of a denoising loop end one of the `steps` a job asked for.

A pipeline's loop runs once per scheduler timestep, and some schedulers have more
timesteps than inference steps: PNDM adds warm-up timesteps (one with `skip_prk_steps`,
Runge-Kutta ones without) and second-order solvers (Heun, KDPM2) call the model twice per
step. `callback_on_step_end` fires on every loop iteration, so counting its calls would
report more steps than were asked for. Diffusers' own progress bar advances only when
`i == last or (i + 1 > warm-up and (i + 1) % order == 0)`; this module applies that same
rule, and numbers the boundaries it lets through 0, 1, 2 ... The legacy `callback` hook
is already called only on those iterations, but with `i // order`, which for PNDM starts
past the warm-up, so it is numbered by counting calls too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class StepBoundaries:
    """Turns the loop index of each callback into the ordinal of a completed step."""

    scheduler: Any
    # Inference steps this loop runs (a resumed loop runs only the remaining ones).
    steps: int
    seen: int = 0

    def completed(self, loop_index: int, pipeline: Any = None) -> int | None:
        """The 0-based ordinal of the step this callback ends, or None when it ends none.

        `pipeline`: given for hooks that fire on every loop iteration (callback_on_step_end);
        its `_num_timesteps` is the loop's length. A resumed loop runs over a trimmed
        schedule while the scheduler holds the full one again, so the scheduler's own
        `timesteps` are only the fallback. Legacy callbacks (no pipeline) end a step each."""
        if pipeline is not None and not self._ends_step(loop_index, pipeline):
            return None
        ordinal = self.seen
        self.seen += 1
        return ordinal

    def _ends_step(self, loop_index: int, pipeline: Any) -> bool:
        length = getattr(pipeline, "_num_timesteps", None)
        if not isinstance(length, int):
            schedule = getattr(self.scheduler, "timesteps", None)
            length = len(schedule) if schedule is not None else 0
        order = int(getattr(self.scheduler, "order", 1) or 1)
        if length <= self.steps:
            return True
        warmup = length - self.steps * order
        last = loop_index == length - 1
        return last or (loop_index + 1 > warmup and (loop_index + 1) % order == 0)
