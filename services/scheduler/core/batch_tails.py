"""How long a model's batches keep the device after their last denoising step, learned
online: from the last step to the batch's first result on an accelerator, and to its last
on a CPU worker (InFlight.batch_done says why).

After the last step only decoding is left on the device, and it scales with the batch. A
unit given its next batch as soon as the last step is reported holds that batch for the
whole tail, while the jobs arriving meanwhile wait for a later one: with two workers at
c=32, that made batches of 7 where 9 fit, and less throughput. Knowing the tail, the next
batch can be formed just before the device frees, with everyone who arrived by then.
"""

from __future__ import annotations

# Weight of the newest observation: a few batches follow a change of hardware or load.
_WEIGHT = 0.25


class BatchTails:
    """Per model, an exponential average of the tail's seconds per job of the batch."""

    def __init__(self) -> None:
        self._per_job_s: dict[str, float] = {}

    def expected_s(self, model: str, size: int) -> float | None:
        """The expected tail of a batch of `size` jobs; None before the first observation."""
        per_job = self._per_job_s.get(model)
        return None if per_job is None else per_job * max(size, 1)

    def observe(self, model: str, size: int, seconds: float) -> None:
        """A batch of `size` jobs left the device `seconds` after its last step was reported."""
        per_job = max(seconds, 0.0) / max(size, 1)
        earlier = self._per_job_s.get(model)
        self._per_job_s[model] = (
            per_job if earlier is None else earlier + _WEIGHT * (per_job - earlier)
        )
