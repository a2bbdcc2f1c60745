"""A step of a batch travels as one RunBatch message: worker_wire packs a run of preview-less
progress events of one step into one BatchEvent and unpacks it into the same events."""

from __future__ import annotations

from mediamesh.common.api.worker_wire import batch_events, worker_events
from mediamesh.common.work import JobFinished, Preview, StepDone, WorkerEvent


def round_trip(events: list[WorkerEvent]) -> list[WorkerEvent]:
    return [e for message in batch_events(events) for e in worker_events(message)]


def test_a_step_of_three_jobs_is_one_message() -> None:
    step = [StepDone(job, 1, 4, 0.25) for job in ("a", "b", "c")]
    (message,) = batch_events(step)
    assert message.job_id == "a" and list(message.more_job_ids) == ["b", "c"]
    assert round_trip(step) == step


def test_steps_previews_and_results_keep_their_order_and_own_messages() -> None:
    preview = Preview(b"webp", "image/webp")
    events: list[WorkerEvent] = [
        StepDone("a", 1, 2, 0.5),
        StepDone("b", 1, 2, 0.5, preview),  # its bytes are its own: a message of its own
        StepDone("c", 1, 2, 0.5),
        StepDone("a", 2, 2, 0.4),
        StepDone("b", 2, 2, 0.4),
        JobFinished("a", b"png", "image/png", 1),
        StepDone("c", 2, 2, 0.4),
    ]
    messages = batch_events(events)
    assert [(m.job_id, list(m.more_job_ids)) for m in messages] == [
        ("a", []),
        ("b", []),
        ("c", []),
        ("a", ["b"]),
        ("a", []),
        ("c", []),
    ]
    assert round_trip(events) == events
