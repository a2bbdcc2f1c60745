"""Random interleavings of everything that can happen to jobs: nothing is lost or run twice."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mediamesh.scheduler.core.effects import Dispatch, Transition
from mediamesh.scheduler.core.jobs import JobState, Priority
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.core.units import Placement

from .fakes import FakeClock, make_core, new_job, worker

EVERYWHERE = dict.fromkeys(Priority, Placement("on-demand", frozenset({"on-demand"}), 0.0))

actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from(list(Priority)),
            st.sampled_from(["a", "b"]),
            st.sampled_from([4, 5]),
            st.booleans(),
        ),
        st.tuples(st.just("advance"), st.floats(0.001, 3.0)),
        st.tuples(st.just("progress"), st.integers(0, 50)),
        st.tuples(st.just("finish"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("preempt"), st.integers(0, 50)),
        st.tuples(st.just("kill"), st.sampled_from(["w0", "w1"])),
        st.tuples(st.just("revive"), st.sampled_from(["w0", "w1"])),
        st.tuples(st.just("end_batch"), st.integers(0, 50)),
    ),
    max_size=80,
)


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.core = make_core(self.clock, placements=EVERYWHERE, max_worker_losses=3)
        for name in ("w0", "w1"):
            self.core.register_worker(worker(name, ("flux-tiny", "echo")))
        self.accepted: list[str] = []
        self.terminal: Counter[str] = Counter()
        self.succeeded: Counter[str] = Counter()
        self.open_batches: dict[str, Dispatch] = {}

    def drain_effects(self) -> None:
        for effect in self.core.take_effects():
            if isinstance(effect, Transition) and effect.state.terminal:
                self.terminal[effect.job.job_id] += 1
                if effect.state is JobState.SUCCEEDED:
                    self.succeeded[effect.job.job_id] += 1

    def schedule(self) -> None:
        queued_before = {
            j.job_id: (j.priority, j.enqueued_at, j.at_front)
            for j in self.core.jobs.values()
            if j.state is JobState.QUEUED
        }
        for dispatch in self.core.schedule():
            spec = self.core.specs[dispatch.model]
            assert 1 <= len(dispatch.jobs) <= spec.batching.max_batch
            assert len({j.compat_key for j in dispatch.jobs}) == 1
            self._check_priority(dispatch, queued_before)
            self.open_batches[dispatch.batch_id] = dispatch
        self.drain_effects()

    def _check_priority(self, dispatch: Dispatch, before: dict) -> None:
        """No queued job of a strictly higher class that waited at least as long is passed over."""
        for job in dispatch.jobs:
            if before[job.job_id][2]:
                continue
            for other in self.core.jobs.values():
                if other.state is not JobState.QUEUED or other.at_front:
                    continue
                if other.model != dispatch.model or other.compat_key != job.compat_key:
                    continue
                assert not (
                    other.priority < job.priority and other.enqueued_at <= job.enqueued_at
                ), "a higher class job that waited longer was passed over"

    def batch_at(self, index: int) -> Dispatch | None:
        if not self.open_batches:
            return None
        keys = sorted(self.open_batches)
        return self.open_batches[keys[index % len(keys)]]

    def run(self, action: tuple) -> None:
        core, kind = self.core, action[0]
        if kind == "submit":
            _, priority, tenant, steps, deadline = action
            outcome = core.submit(
                new_job(
                    priority=priority,
                    tenant=tenant,
                    steps=steps,
                    deadline=self.clock.now + 2.0 if deadline else None,
                )
            )
            if isinstance(outcome, Accepted) and not outcome.deduplicated:
                self.accepted.append(outcome.job.job_id)
        elif kind == "advance":
            self.clock.advance(action[1])
            core.expire_due()
        elif kind in ("progress", "finish", "preempt", "end_batch"):
            batch = self.batch_at(action[1])
            if batch is None:
                return
            for job in batch.jobs:
                if kind == "progress":
                    core.job_progress(job.job_id, batch.batch_id, 1, job.params.steps, 0.01)
                elif kind == "finish":
                    if action[2]:
                        core.job_succeeded(job.job_id, batch.batch_id)
                    else:
                        core.job_failed(job.job_id, batch.batch_id, "INTERNAL", "boom")
                elif kind == "preempt":
                    core.job_preempted(job.job_id, batch.batch_id, "ckpt", 1)
            if kind in ("finish", "preempt", "end_batch"):
                core.batch_ended(batch.batch_id)
                self.open_batches.pop(batch.batch_id, None)
        elif kind == "cancel":
            if self.accepted:
                core.cancel(self.accepted[action[1] % len(self.accepted)])
        elif kind == "kill":
            core.worker_lost(action[1], "killed")
            for batch_id, batch in list(self.open_batches.items()):
                if batch.worker_id == action[1]:
                    del self.open_batches[batch_id]
        elif kind == "revive" and action[1] not in core.units:
            core.register_worker(worker(action[1], ("flux-tiny", "echo")))
        self.drain_effects()
        self.schedule()

    def finish_everything(self) -> None:
        """Workers come back and complete whatever is left, so every job must end."""
        for name in ("w0", "w1"):
            if name not in self.core.units:
                self.core.register_worker(worker(name, ("flux-tiny", "echo")))
        for _ in range(500):
            self.clock.advance(1.0)
            self.core.expire_due()
            self.schedule()
            if not self.open_batches and all(
                self.core.jobs[j].state.terminal for j in self.accepted
            ):
                return
            for batch_id, batch in list(self.open_batches.items()):
                for job in batch.jobs:
                    self.core.job_succeeded(job.job_id, batch_id)
                self.core.batch_ended(batch_id)
                del self.open_batches[batch_id]
            self.drain_effects()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions)
def test_every_accepted_job_ends_exactly_once(script):
    harness = Harness()
    for action in script:
        harness.run(action)
    harness.finish_everything()
    for job_id in harness.accepted:
        assert harness.core.jobs[job_id].state.terminal, f"{job_id} never ended"
        assert harness.terminal[job_id] == 1, f"{job_id} ended {harness.terminal[job_id]} times"
        assert harness.succeeded[job_id] <= 1
    core = harness.core
    assert sum(core.depth.values()) == 0
    assert all(v == 0 for v in core.running.values())
    assert all(u.load_s < 1e-9 for u in core.units.values())


def test_batch_work_progresses_under_sustained_realtime_load():
    clock = FakeClock()
    core = make_core(clock, placements=EVERYWHERE, aging_s_per_class=5.0)
    core.register_worker(worker("w0"))
    bulk = core.submit(new_job(priority=Priority.BATCH, steps=7))
    assert isinstance(bulk, Accepted)
    for i in range(200):
        core.submit(new_job(priority=Priority.REALTIME, steps=4, seed=i))
        core.submit(new_job(priority=Priority.REALTIME, steps=4, seed=1000 + i))
        clock.advance(1.0)
        for dispatch in core.schedule():
            for job in dispatch.jobs:
                core.job_succeeded(job.job_id, dispatch.batch_id)
            core.batch_ended(dispatch.batch_id)
        if bulk.job.state is JobState.SUCCEEDED:
            break
    assert bulk.job.state is JobState.SUCCEEDED
    assert clock.now - bulk.job.created_at <= 15.0
