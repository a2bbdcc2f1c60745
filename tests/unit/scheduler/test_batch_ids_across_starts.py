"""Batch ids name one batch for good: logs, stored jobs' `batch_id` and spans keep them past a
scheduler restart, so a restarted scheduler must not hand out its predecessor's ids again."""

from __future__ import annotations

from mediamesh.common.limits import BATCH_ID, WORKER_ID
from mediamesh.scheduler.core.dispatch import start_tag
from mediamesh.scheduler.core.scheduler import Accepted
from tests.unit.scheduler.fakes import FakeClock, make_core, new_job, worker


def _first_batch_id(started_at: float, worker_id: str = "w1") -> str:
    clock = FakeClock(started_at)
    core = make_core(clock)
    core.register_worker(worker(worker_id))
    assert isinstance(core.submit(new_job()), Accepted)
    clock.advance(1)
    [dispatch] = core.schedule()
    return dispatch.batch_id


def test_a_restarted_scheduler_names_its_first_batch_anew() -> None:
    before, after = _first_batch_id(1_700_000_000.0), _first_batch_id(1_700_000_012.5)
    assert before != after
    assert before.startswith("w1-") and before.endswith("-b0")


def test_the_ids_are_the_same_for_the_same_start() -> None:
    """Deterministic under a test's clock."""
    assert _first_batch_id(1000.0) == _first_batch_id(1000.0)


def test_the_longest_worker_id_keeps_its_batch_ids_within_their_limit() -> None:
    longest = "w" * WORKER_ID.max_bytes
    WORKER_ID.check("worker_id", longest)
    batch_id = _first_batch_id(1_700_000_000.0, longest)
    BATCH_ID.check("batch_id", batch_id)
    # Room left for the count, even with a start tag of the year 2100 (9 characters).
    room = BATCH_ID.max_bytes - len(f"{longest}-{start_tag(4_102_444_800.0)}-b")
    assert room >= len(str(2**63))


def test_the_start_tag_is_the_start_millisecond_in_base_36() -> None:
    assert start_tag(0.0) == "0"
    assert start_tag(35.999) == "rrz"
    assert int(start_tag(1_700_000_000.123), 36) == 1_700_000_000_123
