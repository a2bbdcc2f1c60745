"""Queued jobs of one model, ordered by priority with aging, tenant fair share and EDF.

Heaps and deques hold entries lazily: an entry is live only while its job is QUEUED and
its sequence number is the job's current one, so removal is O(1) and requeues are safe.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from mediamesh.scheduler.core.fair_fill import Candidates, fill_fairly, share_cost
from mediamesh.scheduler.core.jobs import CompatKey, Job, JobState, Priority

Eligible = Callable[[Job], bool]
_INF = math.inf
_ALL = frozenset(Priority)
# Iterating an Enum class is slow enough to show in scheduling profiles.
_PRIORITIES = tuple(Priority)
_QUEUED = JobState.QUEUED


@dataclass
class _Entry:
    seq: int
    job: Job


class _Line(deque[_Entry]):
    """A FIFO of entries that knows how many are live, so it can shed stale ones in bulk."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        super().__init__()
        self.live = 0


@dataclass
class _TenantLine:
    # (deadline, seq, entry): earliest deadline first, then arrival.
    heap: list[tuple[float, int, _Entry]] = field(default_factory=list)
    live: int = 0


class _Bucket:
    """Jobs of one priority class of one model, shared fairly between tenants."""

    def __init__(self, priority: Priority) -> None:
        self.priority = priority
        self.tenants: dict[str, _TenantLine] = {}
        self.vtime: dict[str, float] = defaultdict(float)
        self.virtual_clock = 0.0
        self.oldest: list[tuple[float, int, _Entry]] = []
        self.live = 0
        # Tenants in fair-share order, valid until a tenant goes active or idle or is charged.
        self._share_order: list[str] | None = None

    def add(self, entry: _Entry, is_live: Callable[[_Entry], bool]) -> None:
        job = entry.job
        line = self.tenants.setdefault(job.tenant, _TenantLine())
        if line.live == 0:
            # A tenant returning after idling starts at the current virtual time, so it
            # cannot bank credit while away and then monopolise the class.
            self.vtime[job.tenant] = max(self.vtime[job.tenant], self.virtual_clock)
            self._share_order = None
        deadline = job.deadline if job.deadline is not None else _INF
        heapq.heappush(line.heap, (deadline, entry.seq, entry))
        heapq.heappush(self.oldest, (job.enqueued_at, entry.seq, entry))
        line.live += 1
        self.live += 1

    def oldest_enqueued_at(self, is_live: Callable[[_Entry], bool]) -> float | None:
        while self.oldest and not is_live(self.oldest[0][2]):
            heapq.heappop(self.oldest)
        return self.oldest[0][0] if self.oldest else None

    def tenants_by_share(self) -> list[str]:
        order = self._share_order
        if order is None:
            active = [t for t, line in self.tenants.items() if line.live > 0]
            order = self._share_order = sorted(active, key=lambda t: (self.vtime[t], t))
        return order

    def remove(self, tenant: str) -> None:
        self.live -= 1
        line = self.tenants[tenant]
        line.live -= 1
        if line.live == 0:
            self._share_order = None

    def charge(self, job: Job) -> None:
        self.virtual_clock = max(self.virtual_clock, self.vtime[job.tenant])
        self.vtime[job.tenant] += share_cost(job)
        self._share_order = None


class ModelQueue:
    """Every queued job of one model."""

    def __init__(
        self,
        model: str,
        aging_s_per_class: float,
        views: Collection[frozenset[Priority]] = (),
    ) -> None:
        self.model = model
        # A view is the set of classes some pool may run. Its version moves only when a job
        # of one of those classes (or one at the front) comes, goes or is charged, so a
        # pool's decision about this model is known to hold while its view's version holds.
        self.view_versions: dict[frozenset[Priority], int] = {_ALL: 0} | dict.fromkeys(views, 0)
        self._views_of = {p: [v for v in self.view_versions if p in v] for p in _PRIORITIES}
        self._all_views = list(self.view_versions)
        self._aging = aging_s_per_class
        self._seq = itertools.count()
        self._current: dict[str, int] = {}
        self._front = _Line()
        self._buckets = {p: _Bucket(p) for p in Priority}
        # Per compat key and class, each tenant's jobs in arrival order: batch companions
        # are drawn from these by fair share. A tenant's line goes once it holds no job.
        self._by_key: dict[CompatKey, dict[Priority, dict[str, _Line]]] = {}
        self._front_by_key: dict[CompatKey, _Line] = defaultdict(_Line)
        self.depth = 0
        # Bumped by every change to what the queue holds or how it orders it.
        self.version = 0
        # Bumped only when a class's oldest job changes, which is all its aging depends on.
        self._order_version = 0
        self._order: tuple[int, tuple[int, ...]] | None = None

    def _is_live(self, entry: _Entry) -> bool:
        job = entry.job
        return job.state is _QUEUED and self._current.get(job.job_id) == entry.seq

    def add(self, job: Job) -> None:
        """Queue a job: at the front when `job.at_front`, otherwise in its class."""
        entry = _Entry(next(self._seq), job)
        self._current[job.job_id] = entry.seq
        self.depth += 1
        self._changed(job)
        key = job.compat_key
        if job.at_front:
            for line in (self._front, self._front_by_key[key]):
                line.append(entry)
                line.live += 1
            return
        bucket = self._buckets[job.priority]
        # The class's oldest job sets its aging. A new job is rarely older than those
        # queued, but one restored after a restart keeps its wait (Admission.restore).
        oldest = bucket.oldest_enqueued_at(self._is_live) if bucket.live else None
        if oldest is None or job.enqueued_at < oldest:
            self._order_version += 1
        bucket.add(entry, self._is_live)
        per_class = self._by_key.get(key)
        if per_class is None:
            per_class = self._by_key[key] = {p: {} for p in _PRIORITIES}
        line = per_class[job.priority].setdefault(job.tenant, _Line())
        line.append(entry)
        line.live += 1

    def remove(self, job: Job) -> None:
        """Forget a job that left the queue; its stale entries are skipped later."""
        if job.job_id not in self._current:
            return
        if not job.at_front:
            # Compared by time, so it holds even if the job no longer counts as live.
            oldest = self._buckets[job.priority].oldest_enqueued_at(self._is_live)
            if oldest is None or job.enqueued_at <= oldest:
                self._order_version += 1
        del self._current[job.job_id]
        self.depth -= 1
        self._changed(job)
        if job.at_front:
            self._front.live -= 1
            self._front_by_key[job.compat_key].live -= 1
        else:
            self._buckets[job.priority].remove(job.tenant)
            by_tenant = self._by_key[job.compat_key][job.priority]
            line = by_tenant[job.tenant]
            line.live -= 1
            if not line.live:
                del by_tenant[job.tenant]

    def oldest_enqueued_at(self) -> float | None:
        """When the longest-waiting job entered the queue; amortised O(1) via the heaps."""
        times = [
            at
            for bucket in self._buckets.values()
            if bucket.live and (at := bucket.oldest_enqueued_at(self._is_live)) is not None
        ]
        front = next(self._live_entries(self._front), None)
        if front is not None:
            times.append(front.job.enqueued_at)
        return min(times, default=None)

    def effective_priority(self, priority: Priority, now: float) -> float | None:
        """Class minus aging credit of its oldest job; lower wins. None when empty."""
        bucket = self._buckets[priority]
        if bucket.live == 0:
            return None
        oldest = bucket.oldest_enqueued_at(self._is_live)
        if oldest is None:
            return None
        return int(priority) - (now - oldest) / self._aging

    def _ranked(self, now: float) -> list[tuple[float, int]]:
        ranked = []
        for priority in _PRIORITIES:
            effective = self.effective_priority(priority, now)
            if effective is not None:
                ranked.append((effective, int(priority)))
        return sorted(ranked)

    def class_order(self, now: float) -> tuple[int, ...]:
        """Priority classes in the order `best` tries them now.

        Aging moves every class's effective priority at the same rate, so the order only
        changes when a class's oldest job does (a class filling from empty, or losing its
        oldest job); it is kept until then unless two classes are close enough for
        rounding to swap them at some later time.
        """
        cached = self._order
        if cached is not None and cached[0] == self._order_version:
            return cached[1]
        ranked = self._ranked(now)
        order = tuple(priority for _, priority in ranked)
        if all(b[0] - a[0] > 1e-9 for a, b in itertools.pairwise(ranked)):
            self._order = (self._order_version, order)
        return order

    def class_order_in(self, view: frozenset[Priority], now: float) -> tuple[int, ...]:
        """`class_order` restricted to the classes of `view`: the part a pool's decisions
        depend on. A pool that runs one class does not care how the others rank."""
        if len(view) < 2:
            return ()
        order = self.class_order(now)
        return order if len(view) == len(_PRIORITIES) else tuple(p for p in order if p in view)

    def best(self, now: float, eligible: Eligible) -> tuple[tuple[float, ...], Job] | None:
        """The job this model would run next, with a sort key comparable across models."""
        if self._front.live:
            # Jobs sent back to the front (their worker lost, a scheduler restarted) go by
            # class, then in the order they came back: a paused BATCH job and the REALTIME
            # job it was paused for come back together, and the urgent one must lead.
            first: _Entry | None = None
            for entry in self._live_entries(self._front):
                if (first is None or entry.job.priority < first.job.priority) and eligible(
                    entry.job
                ):
                    first = entry
            if first is not None:
                return (0, int(first.job.priority), first.seq), first.job
        is_live, buckets = self._is_live, self._buckets
        for priority in self.class_order(now):
            bucket = buckets[_PRIORITIES[priority]]
            lines = bucket.tenants
            for tenant in bucket.tenants_by_share():
                # The tenant's head: its first live entry, stale ones popped on the way.
                line = lines.get(tenant)
                if line is None:
                    continue
                heap = line.heap
                while heap and not is_live(heap[0][2]):
                    heapq.heappop(heap)
                if not heap:
                    continue
                head = heap[0][2]
                if eligible(head.job):
                    job = head.job
                    effective = self.effective_priority(job.priority, now)
                    assert effective is not None, "the class holds `head`, so it has an oldest job"
                    deadline = job.deadline if job.deadline is not None else _INF
                    return (1, effective, deadline, head.seq), job
        return None

    def companions(
        self, lead: Job, limit: int, eligible: Eligible, classes: Sequence[Priority] = _PRIORITIES
    ) -> list[Job]:
        """Up to `limit` other queued jobs that may share a batch with `lead`, front first,
        then by class in `classes` order (highest first), and within a class by tenants'
        weighted fair share, as `best` picks the lead. `eligible` rejects every job outside
        `classes`, so those classes' lines are not walked."""
        key = lead.compat_key
        found: list[Job] = []
        front = self._front_by_key.get(key)
        if front is not None:
            self._fill_in_order(front, lead, limit, eligible, found)
        per_class = self._by_key.get(key)
        if per_class is None:
            return found
        for priority in classes:
            if len(found) >= limit:
                break
            by_tenant = per_class[priority]
            if len(by_tenant) == 1:
                # One tenant shares nothing: its jobs go in arrival order, as ever.
                for line in by_tenant.values():
                    self._fill_in_order(line, lead, limit, eligible, found)
            elif by_tenant:
                vtime = self._buckets[priority].vtime
                start = {tenant: vtime[tenant] for tenant in by_tenant}
                if lead.priority is priority and not lead.at_front and lead.tenant in start:
                    # The lead is charged with the batch, after this; its tenant's share
                    # already counts it.
                    start[lead.tenant] += share_cost(lead)
                candidates = {t: self._candidates(line, lead) for t, line in by_tenant.items()}
                found += fill_fairly(candidates, start, limit - len(found), eligible)
        return found

    def _fill_in_order(
        self, line: _Line, lead: Job, limit: int, eligible: Eligible, found: list[Job]
    ) -> None:
        # Written out rather than through `_live_entries`: this runs on every batch attempt.
        if not self._shed_stale(line):
            return
        current = self._current
        for entry in line:
            if len(found) >= limit:
                return
            job = entry.job
            if (
                job is not lead
                and job.state is _QUEUED
                and current.get(job.job_id) == entry.seq
                and eligible(job)
            ):
                found.append(job)

    def _candidates(self, line: _Line, lead: Job) -> Candidates:
        for entry in self._live_entries(line):
            if entry.job is not lead:
                yield entry.seq, entry.job

    def _live_entries(self, line: _Line) -> Iterator[_Entry]:
        if not self._shed_stale(line):
            return
        # Callers only read the queues while iterating, so the line need not be copied.
        for entry in line:
            if self._is_live(entry):
                yield entry

    def _shed_stale(self, line: _Line) -> bool:
        """Drop the line's stale head, and its stale middle once that outgrows the live
        entries; False when nothing in it is live."""
        if not line.live:
            line.clear()
            return False
        is_live = self._is_live
        while line and not is_live(line[0]):
            line.popleft()
        if len(line) > 2 * line.live + 16:
            # Jobs taken from behind a head that cannot run yet (a tenant at its limit, a
            # job waiting for its pool) leave stale entries every later scan would walk.
            live = [entry for entry in line if is_live(entry)]
            line.clear()
            line.extend(live)
        return True

    def _changed(self, job: Job) -> None:
        self.version += 1
        versions = self.view_versions
        for view in self._all_views if job.at_front else self._views_of[job.priority]:
            versions[view] += 1

    def charge(self, job: Job) -> None:
        """Count a job just taken to run against its tenant's fair share of its class."""
        self._changed(job)
        if not job.at_front:
            self._buckets[job.priority].charge(job)

    def jobs(self) -> Iterator[Job]:
        """Every queued job once, in no particular order."""
        seen: set[str] = set()
        in_heaps = (
            entry
            for bucket in self._buckets.values()
            for line in bucket.tenants.values()
            for _, _, entry in line.heap
        )
        for item in itertools.chain(self._front, in_heaps):
            if self._is_live(item) and item.job.job_id not in seen:
                seen.add(item.job.job_id)
                yield item.job
