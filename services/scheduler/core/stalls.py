"""What a unit class saw when it last could not form a batch, so later passes can skip it.

`_form_batch` reads only the class's model queues, the running counts of tenants with a
concurrency limit, whether some pools have room, each queue's aged class order, and the
clock against batch windows and fallback delays (which it records as wakeups). While all
of those are unchanged and no recorded wakeup has passed, it would fail again the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stall:
    models: tuple[str, ...]
    queue_versions: tuple[int, ...]
    tenants_version: int
    # (model, pool) -> had room, for every pool whose room the evaluation consulted.
    rooms: dict[tuple[str, str], bool]
    class_orders: tuple[tuple[int, ...], ...]
    # The earliest recorded wakeup after the evaluation: a window or fallback opens then.
    until: float
    wakeups: tuple[float, ...]
