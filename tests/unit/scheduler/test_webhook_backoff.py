"""The webhook retry backoff: each failed attempt waits twice as long as the one before,
from `first_backoff_s`, never longer than `max_backoff_s`, and the schedule is recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler.store.artifacts import LocalArtifactStore
from mediamesh.scheduler.store.deliveries import DeliveryStatus, WebhookDelivery
from mediamesh.scheduler.store.job_store import JobStore
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_delivery import WebhookDeliverer
from tests.unit.scheduler.fakes import FakeClock


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    store = JobStore(tmp_path / "jobs.sqlite3")
    yield store
    await store.close()


@pytest.fixture
async def writer(store: JobStore) -> AsyncIterator[StoreWriter]:
    writer = StoreWriter(store)
    writer.start()
    yield writer
    await writer.close(5.0)


def deliverer(
    settings: WebhookSettings, writer: StoreWriter, tmp_path: Path, clock: FakeClock
) -> WebhookDeliverer:
    return WebhookDeliverer(
        settings, writer, LocalArtifactStore(tmp_path / "artifacts"), clock=clock
    )


@pytest.mark.parametrize(
    ("first", "maximum", "expected"),
    [
        (1.0, 600.0, [1.0, 2.0, 4.0, 8.0]),
        (0.25, 1.5, [0.25, 0.5, 1.0, 1.5, 1.5]),  # the 4th would be 2.0: capped
        (3.0, 5.0, [3.0, 5.0, 5.0]),  # the 2nd would be 6.0: capped
        (7.0, 5.0, [5.0, 5.0]),  # a first wait above the maximum is capped too
    ],
)
async def test_waits_double_after_each_failure_up_to_the_maximum(
    first: float, maximum: float, expected: list[float], writer: StoreWriter, tmp_path: Path
) -> None:
    settings = WebhookSettings(first_backoff_s=first, max_backoff_s=maximum)
    hooks = deliverer(settings, writer, tmp_path, FakeClock())
    assert [hooks.backoff_s(n) for n in range(1, len(expected) + 1)] == expected


async def test_the_defaults_reach_their_ten_minute_cap_and_stay_there(
    writer: StoreWriter, tmp_path: Path
) -> None:
    hooks = deliverer(WebhookSettings(), writer, tmp_path, FakeClock())
    assert [hooks.backoff_s(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert hooks.backoff_s(10) == 512.0 and hooks.backoff_s(11) == 600.0
    assert hooks.backoff_s(12) == 600.0  # the last retry of the default 12 attempts


async def test_each_failed_attempt_is_rescheduled_after_the_doubled_wait_and_recorded(
    store: JobStore, writer: StoreWriter, tmp_path: Path
) -> None:
    clock = FakeClock(1000.0)
    settings = WebhookSettings(first_backoff_s=1.0, max_backoff_s=5.0, max_attempts=6)
    hooks = deliverer(settings, writer, tmp_path, clock)
    delivery = WebhookDelivery(
        delivery_id="d-1",
        job_id="job-1",
        tenant="acme",
        url="https://hooks.example.com/hook",
        event="completed",
        payload="{}",
        created_at=clock.now,
        next_attempt_at=clock.now,
    )
    waits = []
    for _ in range(settings.max_attempts - 1):
        hooks._record(delivery, "HTTP 503")
        assert delivery.status is DeliveryStatus.PENDING
        waits.append(delivery.next_attempt_at - clock.now)
        clock.now = delivery.next_attempt_at  # the next attempt happens on time
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    # The last attempt allowed fails too: given up, not rescheduled.
    scheduled = delivery.next_attempt_at
    hooks._record(delivery, "HTTP 503")
    assert delivery.status is DeliveryStatus.FAILED and delivery.next_attempt_at == scheduled
    assert await writer.flush(5.0)
    (stored,) = await store.deliveries_of("job-1")
    assert stored.status is DeliveryStatus.FAILED and stored.attempts == settings.max_attempts
    assert stored.last_error == "HTTP 503" and stored.finished_at == clock.now


async def test_a_huge_attempt_count_stays_at_the_cap(writer: StoreWriter, tmp_path: Path) -> None:
    # 2.0 ** 1024 overflows a float: the exponent must be bounded before the cap applies.
    hooks = deliverer(WebhookSettings(), writer, tmp_path, FakeClock())
    assert hooks.backoff_s(5000) == 600.0
