"""Server-sent event ids: ordered, deterministic from the events, resumable on any replica."""

from __future__ import annotations

import pytest

from mediamesh.gateway.http.event_ids import FINAL_ID, EventIds, parse_event_id


def queued() -> dict:
    return {"kind": "queued", "position": 0}


def dispatched(attempt: int) -> dict:
    return {"kind": "notice", "notice": "dispatched", "attempt": attempt}


def progress(step: int, attempt: int = 1) -> dict:
    return {"kind": "progress", "step": step, "total_steps": 4, "attempt": attempt}


RESULT = {"kind": "result"}
LIFE = [queued(), dispatched(1), progress(1), progress(2), progress(3), progress(4), RESULT]


def ids_of(events: list[dict], resume: str | None = None) -> list[str | None]:
    ids = EventIds(parse_event_id(resume) if resume else None)
    return [ids.assign(e) for e in events]


def test_a_jobs_life_gets_increasing_ids_ending_in_end():
    ids = ids_of(LIFE)
    assert ids == ["0.0.0", "1.0.3", "1.1.2", "1.2.2", "1.3.2", "1.4.2", FINAL_ID]
    keys = [parse_event_id(i) for i in ids if i]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_the_same_events_get_the_same_ids_on_another_stream():
    assert ids_of(LIFE) == ids_of(list(LIFE))


def test_a_resume_drops_a_snapshot_the_client_has_seen_and_sends_what_is_new():
    # Client saw step 2, reconnects; the new Watch starts with a snapshot of step 2.
    assert ids_of([progress(2), progress(3), RESULT], resume="1.2.2") == [None, "1.3.2", "end"]
    # The job moved on meanwhile: the snapshot is news and is sent.
    assert ids_of([progress(3), RESULT], resume="1.2.2") == ["1.3.2", "end"]


def test_a_resume_after_the_end_sends_nothing():
    assert ids_of([RESULT], resume=FINAL_ID) == [None]


def test_a_retry_keeps_ids_growing():
    events = [progress(2), {"kind": "notice", "notice": "retry", "attempt": 1}, queued()]
    events += [dispatched(2), progress(1, attempt=2), RESULT]
    ids = ids_of(events)
    keys = [parse_event_id(i) for i in ids if i]
    assert None not in ids
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert ids[3] == "2.0.3" and ids[4] == "2.1.2"


def test_a_resume_in_a_requeued_job_skips_the_stale_queue_snapshot():
    # The client saw attempt 1 fail at step 2; the job is queued again.
    assert ids_of([queued(), dispatched(2)], resume="1.2.3") == [None, "2.0.3"]


def test_a_resume_after_a_step_of_a_job_queued_again_tells_it_is_queued():
    # The client saw step 8 of attempt 1; its worker was lost and the job queued again. The
    # snapshot's natural id (1.8.0) is below the client's, yet it is news: a stale RUNNING
    # step is all the client would show until the next dispatch.
    assert ids_of([queued(), dispatched(2)], resume="1.8.2") == ["1.8.3", "2.0.3"]
    # A snapshot of the step the client saw is still dropped.
    assert ids_of([progress(8), progress(9)], resume="1.8.2") == [None, "1.9.2"]


@pytest.mark.parametrize("text", ["", "1.2", "a.b.c", "1.2.3.4", "-1.0.0", "1" * 30 + ".0.0"])
def test_ids_this_module_did_not_make_are_refused(text):
    with pytest.raises(ValueError):
        parse_event_id(text)
