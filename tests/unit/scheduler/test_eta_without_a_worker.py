"""A job for a model no worker serves waits for a worker to start (a pool scaling from zero),
which the cost model cannot estimate: its queued event carries no ETA rather than the job's
own cost, which promised it within a fraction of a second."""

from __future__ import annotations

import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.scheduler.api import convert
from mediamesh.scheduler.core.interface import Accepted
from mediamesh.scheduler.core.jobs import JobState, Priority
from mediamesh.scheduler.events import WatchEvent

from .fakes import FakeClock, make_core, new_job, worker


def test_no_estimate_until_a_worker_serves_the_model() -> None:
    clock = FakeClock()
    core = make_core(clock)
    assert core.estimate_finish_s("flux-tiny", Priority.STANDARD, 0.2) is None
    # With no worker, a deadline still admits the job on its own cost (it may scale up).
    outcome = core.submit(new_job(deadline=clock() + 30.0))
    assert isinstance(outcome, Accepted)
    core.register_worker(worker("w0"))
    estimate = core.estimate_finish_s("flux-tiny", Priority.STANDARD, 0.2)
    assert estimate == pytest.approx(outcome.job.cost_s + 0.2)


def test_an_unknown_eta_leaves_the_wire_field_unset() -> None:
    unknown = WatchEvent("j1", JobState.QUEUED, "queued", position=3, queue="image")
    message = convert.generate_event(unknown, None, 0)
    assert not message.queued.HasField("eta_s") and message.queued.position == 3
    known = WatchEvent("j1", JobState.QUEUED, "queued", eta_s=0.0, queue="image")
    # Zero is an estimate too, and is sent as one.
    assert convert.generate_event(known, None, 0).queued.HasField("eta_s")
    assert isinstance(message, common_pb2.GenerateEvent)
