"""Filling a batch between tenants by weighted fair share, as its lead is chosen.

A batch's lead is the job of the tenant furthest behind its share (`ModelQueue.best`); the
rest of the batch must be chosen the same way, or the tenant that queued first fills every
batch whatever the weights say.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping

from mediamesh.scheduler.core.jobs import Job

# (sequence number, job): a tenant's candidates, in arrival order.
Candidates = Iterator[tuple[int, Job]]


def share_cost(job: Job) -> float:
    """How far running `job` moves its tenant's virtual time in its class."""
    return max(job.cost_s, 1e-6) / job.quota.weight


def fill_fairly(
    candidates: Mapping[str, Candidates],
    start: Mapping[str, float],
    room: int,
    eligible: Callable[[Job], bool],
) -> list[Job]:
    """Up to `room` jobs, each from the tenant whose virtual time is least (from `start`,
    advanced by every job taken), ties by arrival: start-time fair queuing.

    `eligible` is asked about each job once, when it is considered, as a walk in arrival
    order would ask it (the dispatcher's counts tenants' joining jobs as it answers), and
    the walk ends once `room` jobs are taken, so it costs no more than that walk.
    """
    heap: list[tuple[float, int, str, Job]] = []
    lines: dict[str, Candidates] = {}
    for tenant, entries in candidates.items():
        first = next(entries, None)
        if first is not None:
            lines[tenant] = entries
            heap.append((start[tenant], first[0], tenant, first[1]))
    heapq.heapify(heap)
    taken: list[Job] = []
    while heap and len(taken) < room:
        virtual_time, _, tenant, job = heap[0]
        if eligible(job):
            taken.append(job)
            virtual_time += share_cost(job)
        following = next(lines[tenant], None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (virtual_time, following[0], tenant, following[1]))
    return taken
