"""What a unit class saw when it last could not batch one of its models, so later passes
can skip that model.

`_form_batch` decides each model from the model's queued jobs of the classes the unit's
pool may run, the running counts of tenants with a concurrency limit, whether the model's
preferred pools have room, the aged order of the classes the pool may run, and the clock
against batch windows and fallback delays (which it records as wakeups). While all of
those are unchanged and no recorded wakeup has passed, it would fail again the same way.
"""

from __future__ import annotations

from typing import NamedTuple


class Stall(NamedTuple):
    """What one model's failure to batch on a unit class depended on."""

    # The version of the queue's view for the class's pool (see ModelQueue.view_versions).
    queue_version: int
    tenants_version: int
    # ((model, pool), had room) for every pool of this model whose room it consulted.
    rooms: tuple[tuple[tuple[str, str], bool], ...]
    class_order: tuple[int, ...]
    # The earliest recorded wakeup after the evaluation: a window or fallback opens then.
    until: float
    # The earliest recorded wakeup of all, past ones included (those ask for another pass
    # at once): `next_wakeup` needs only the minimum over the stalls that hold.
    next_wakeup: float
