"""Discrete-event simulation driving the real scheduler core with a virtual clock.

Arrivals come from precomputed arrays; everything else (batch completions, core timers,
devices starting, spot notices, autoscaler polls, samples) is a heap of events. After each
event the engine asks the core to schedule, but only when that can do something: a device is
idle and a job is queued. Otherwise `schedule()` is a no-op and skipping it keeps the
million-job runs fast.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any

from mediamesh.common.registry import ModelSpec
from mediamesh.scheduler.core.effects import Dispatch, Transition
from mediamesh.scheduler.core.interface import CoreFactory, NewJob, Rejection, SchedulingCore
from mediamesh.scheduler.core.jobs import GenerationParams, Priority, TenantQuota
from mediamesh.scheduler.core.policy import CorePolicy
from mediamesh.sim.arrivals import ArrivalPlan
from mediamesh.sim.fleet import Device, RunningBatch
from mediamesh.sim.records import OUTCOME_OF_STATE, REJECTED, JobRecords

# Event kinds, in the order simultaneous events are handled.
TIMER, BATCH_DONE, READY, NOTICE, GONE, POLL, SAMPLE = range(7)

# Each kind has its own payload type (a Device, a (Device, RunningBatch) pair, an index),
# which one mapping from kind to handler cannot spell out.
Handler = Callable[[Any], None]


class Engine:
    """The clock, the event heap and the core; the fleet plugs its handlers in."""

    def __init__(
        self,
        specs: list[ModelSpec],
        policy: CorePolicy,
        plan: ArrivalPlan,
        params: dict[str, GenerationParams],
        quotas: dict[str, TenantQuota],
        records: JobRecords,
        make_core: CoreFactory,
    ) -> None:
        self.now = 0.0
        self._index = 0
        self.core: SchedulingCore = make_core(specs, policy, self._clock, self._new_id)
        self.plan = plan
        self.records = records
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self._timers: set[float] = set()
        self.handlers: dict[int, Handler] = {}
        self.devices: dict[str, Device] = {}
        self.idle = 0
        self.accepted = 0
        self.ended = 0
        self.dispatches = 0
        self.dispatched_jobs = 0
        # The runtime's dispatch loop coalesces events that arrive while it runs; a period
        # > 0 models a loop that passes at most that often (0: after every event).
        self.dispatch_interval_s = 0.0
        self._next_pass_at = 0.0
        # Stop early (a hopeless right-sizing trial) once this many jobs are queued.
        self.abort_above_queued: int | None = None
        self.aborted = False
        self._new_jobs = self._prepare_requests(plan, params, quotas)

    def _clock(self) -> float:
        return self.now

    def _new_id(self) -> str:
        # The job's id is its arrival index, so records need no lookup table.
        return str(self._index)

    @staticmethod
    def _prepare_requests(
        plan: ArrivalPlan, params: dict[str, GenerationParams], quotas: dict[str, TenantQuota]
    ) -> dict[tuple[int, int, int], NewJob]:
        # A NewJob carries nothing job-specific here, so one per (model, priority, tenant)
        # is shared by every arrival of that kind.
        blank = GenerationParams(prompt="")
        requests = {}
        for m, model in enumerate(plan.models):
            for p in Priority:
                for t, tenant in enumerate(plan.tenants):
                    requests[(m, int(p), t)] = NewJob(
                        tenant=tenant,
                        model=model,
                        priority=p,
                        params=params.get(model, blank),
                        quota=quotas.get(tenant, TenantQuota()),
                    )
        return requests

    def at(self, time: float, kind: int, payload: object = None) -> None:
        heapq.heappush(self._heap, (time, next(self._seq), kind, payload))

    # ---- main loop -----------------------------------------------------------------------

    def run(self, until: float) -> None:
        """Process arrivals and events until every accepted job ended or `until` passes."""
        heap, plan, core = self._heap, self.plan, self.core
        times = plan.times.tolist()
        models, priorities, tenants = (
            plan.model.tolist(),
            plan.priority.tolist(),
            plan.tenant.tolist(),
        )
        requests, handlers, records = self._new_jobs, self.handlers, self.records
        depth = core.depth
        n = len(times)
        i = 0
        next_arrival = times[0] if n else math.inf
        while True:
            if heap and heap[0][0] <= next_arrival:
                time, _, kind, payload = heapq.heappop(heap)
                if time > until:
                    self.now = until
                    break
                self.now = time
                if kind == TIMER:
                    self._timers.discard(time)
                else:
                    handlers[kind](payload)
                    if kind >= POLL:
                        continue  # observes or resizes the fleet; nothing to schedule yet
            elif i < n:
                self.now = next_arrival
                self._index = i
                request = requests[(models[i], priorities[i], tenants[i])]
                outcome = core.submit(request)
                if outcome.__class__ is Rejection:
                    records.end(i, REJECTED, next_arrival)
                else:
                    self.accepted += 1
                i += 1
                next_arrival = times[i] if i < n else math.inf
            else:
                break
            if self.idle and sum(depth.values()):
                self._schedule()
            self._drain_effects()
            if i >= n and self.ended >= self.accepted:
                break
            if self.aborted:
                break

    def _schedule(self) -> None:
        if self.dispatch_interval_s > 0:
            if self.now < self._next_pass_at:
                self._wake_at(self._next_pass_at)
                return
            self._next_pass_at = self.now + self.dispatch_interval_s
        for dispatch in self.core.schedule():
            self._start_batch(dispatch)
        wake = self.core.next_wakeup()
        if wake is not None:
            self._wake_at(wake)

    def _wake_at(self, time: float) -> None:
        if time not in self._timers:
            self._timers.add(time)
            self.at(time, TIMER)

    def check_backlog(self) -> None:
        limit = self.abort_above_queued
        if limit is not None and sum(self.core.depth.values()) > limit:
            self.aborted = True

    def _drain_effects(self) -> None:
        core, records = self.core, self.records
        for effect in core.take_effects():
            if effect.__class__ is Transition:
                outcome = OUTCOME_OF_STATE.get(effect.state)
                if outcome is not None:
                    job = effect.job
                    records.end(int(job.job_id), outcome, self.now)
                    self.ended += 1
                    core.forget(job.job_id)

    # ---- batches -------------------------------------------------------------------------

    def _start_batch(self, dispatch: Dispatch) -> None:
        device = self.devices[dispatch.worker_id]
        jobs = dispatch.jobs
        step_s, overhead_s = device.speed.batch(dispatch.model, len(jobs))
        steps = max(job.total_steps - job.step for job in jobs)
        now = self.now
        first_dispatch = self.records.first_dispatch
        for job in jobs:
            if job.attempts == 1:
                first_dispatch[int(job.job_id)] = now
        ends_at = now + overhead_s + steps * step_s
        device.batch = RunningBatch(dispatch.batch_id, jobs, now, step_s, overhead_s, ends_at)
        self.idle -= 1
        self.dispatches += 1
        self.dispatched_jobs += len(jobs)
        self.at(ends_at, BATCH_DONE, (device, device.batch))

    def finish_batch(self, device: Device, batch: RunningBatch) -> bool:
        """The device's batch completed: every job succeeded at its last step."""
        if device.batch is not batch:
            return False  # preempted before it could finish
        core, batch_id = self.core, batch.batch_id
        for job in batch.jobs:
            job_id = job.job_id
            # One progress report per job calibrates the core's cost model like a real run.
            core.job_progress(job_id, batch_id, job.total_steps, job.total_steps, batch.step_s)
            core.job_succeeded(job_id, batch_id)
        core.batch_ended(batch_id)
        device.busy_s += self.now - batch.started_at
        device.batch = None
        if not device.draining:
            self.idle += 1
        return True

    def preempt_batch(self, device: Device) -> None:
        """Checkpoint the device's running jobs at their current step and hand them back."""
        batch = device.batch
        if batch is None:
            return
        elapsed = self.now - batch.started_at
        done = int(max(elapsed - batch.overhead_s, 0.0) / batch.step_s) if batch.step_s else 0
        for job in batch.jobs:
            step = min(job.step + done, max(job.total_steps - 1, 0))
            checkpoint = f"sim://checkpoints/{batch.batch_id}/{job.job_id}@{step}"
            self.core.job_preempted(job.job_id, batch.batch_id, checkpoint, step)
        self.records.preempted += len(batch.jobs)
        self.core.batch_ended(batch.batch_id)
        device.busy_s += elapsed
        device.batch = None
