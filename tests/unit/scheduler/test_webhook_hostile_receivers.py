"""A tenant's webhook receiver cannot stall delivery or fill the scheduler's memory: one
attempt has `webhooks.timeout_s` in all, however slowly the answer trickles in; no more than
RESPONSE_READ_BYTES of an answer's body is read; and one tenant's deliveries hold only their
share of the slots, so another tenant's arrive meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler import webhook_delivery
from mediamesh.scheduler.store.artifacts import LocalArtifactStore
from mediamesh.scheduler.store.deliveries import DeliveryStatus, WebhookDelivery
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_delivery import RESPONSE_READ_BYTES, WebhookDeliverer
from tests.webhook_receiver import Receiver, webhook_receiver


@pytest.fixture
async def other() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r


def settings(*receivers: Receiver, **overrides: object) -> WebhookSettings:
    fields: dict = {
        "allowed_hosts": [f"127.0.0.1:{r.port}" for r in receivers] + ["hooks.example.com"],
        "secrets": {"slow": SecretStr("s1"), "fast": SecretStr("s2")},
        "max_attempts": 1,
        "timeout_s": 1.0,
        **overrides,
    }
    return WebhookSettings(**fields)


def delivery(n: int, url: str, tenant: str = "slow") -> WebhookDelivery:
    return WebhookDelivery(
        delivery_id=f"d-{tenant}-{n}",
        job_id=f"job-{tenant}-{n}",
        tenant=tenant,
        url=url,
        event="completed",
        payload='{"event":"completed"}',
        created_at=time.time(),
        next_attempt_at=time.time(),
    )


async def until_done(deliveries: list[WebhookDelivery], timeout: float) -> float:
    """Seconds until every delivery left PENDING; fails after `timeout`."""
    started = time.monotonic()
    while any(d.status is DeliveryStatus.PENDING for d in deliveries):
        assert time.monotonic() - started < timeout, [d.last_error for d in deliveries]
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_dripping_answer_fails_the_attempt_within_the_timeout(
    writer: StoreWriter, tmp_path: Path, receiver: Receiver
) -> None:
    # 200 and its headers at once, then a byte of the body every 0.3 s: no read ever waits
    # for the 1 s timeout, so only a limit on the whole attempt ends it.
    receiver.mode, receiver.drip_interval_s = "drip", 0.3
    hooks = WebhookDeliverer(settings(receiver), writer, LocalArtifactStore(tmp_path / "artifacts"))
    hook = delivery(1, receiver.url)
    try:
        hooks.start([hook])
        took = await until_done([hook], timeout=10.0)
    finally:
        await hooks.close()
    assert took <= 1.0 + 1.0
    assert hook.status is DeliveryStatus.FAILED
    assert hook.last_error == "no complete answer within webhooks.timeout_s (1 s)"
    assert receiver.body_bytes_sent < 10  # it was still dripping when the attempt ended


async def test_a_slow_tenant_holds_only_its_share_and_another_tenant_is_delivered_meanwhile(
    writer: StoreWriter, tmp_path: Path, receiver: Receiver, other: Receiver
) -> None:
    receiver.mode, receiver.drip_interval_s = "drip", 0.5
    hooks = WebhookDeliverer(
        settings(receiver, other, max_concurrent=4, timeout_s=3.0),
        writer,
        LocalArtifactStore(tmp_path / "artifacts"),
    )
    slow = [delivery(n, receiver.url) for n in range(8)]
    fast = delivery(0, other.url, tenant="fast")
    try:
        hooks.start(slow)
        await receiver.wait_for(1, timeout=5.0)  # the slow tenant's attempts are under way
        sent = time.monotonic()
        hooks.start([fast])
        (arrived,) = await other.wait_for(1, timeout=10.0)
        assert arrived.at - sent < 1.0, "another tenant's webhook waited for the slow one's"
        await until_done([fast], timeout=5.0)
        assert fast.status is DeliveryStatus.DELIVERED
        # One at a time for the slow tenant: its share of 4 slots.
        assert len(receiver.received) == 1
    finally:
        await hooks.close()


async def test_a_huge_answer_is_not_read(
    writer: StoreWriter, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.mode, receiver.huge_bytes = "huge", 256 * 2**20
    hooks = WebhookDeliverer(
        settings(receiver, timeout_s=10.0),
        writer,
        LocalArtifactStore(tmp_path / "artifacts"),
    )
    hook = delivery(1, receiver.url)
    try:
        hooks.start([hook])
        took = await until_done([hook], timeout=20.0)
    finally:
        await hooks.close()
    # The status is the answer; the body, declared far over the limit, is left unread, and
    # what the receiver got out is no more than the sockets' buffers took.
    assert hook.status is DeliveryStatus.DELIVERED, hook.last_error
    assert took < 2.0
    assert receiver.body_bytes_sent < 16 * 2**20


class CountingBody(httpx.AsyncByteStream):
    """An answer body made on demand, counting the bytes the client pulled."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.pulled < self.size:
            piece = b"x" * min(16384, self.size - self.pulled)
            self.pulled += len(piece)
            yield piece


@pytest.mark.parametrize(
    ("size", "declared", "read"),
    [
        (100, True, 100),  # a small body is read to its end: the connection can serve again
        (RESPONSE_READ_BYTES, True, RESPONSE_READ_BYTES),
        (RESPONSE_READ_BYTES + 1, True, 0),  # over the limit: not read at all
        (1500 * 2**20, True, 0),
        (1500 * 2**20, False, 0),  # chunked, no length said: not read either
    ],
)
async def test_at_most_the_limit_of_an_answer_body_is_read(
    size: int,
    declared: bool,
    read: int,
    writer: StoreWriter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = CountingBody(size)

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-length": str(size)} if declared else {}
        return httpx.Response(200, headers=headers, stream=body)

    hooks = WebhookDeliverer(settings(), writer, LocalArtifactStore(tmp_path / "a"))
    monkeypatch.setattr(hooks, "resolve", public_address)
    hooks._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    hook = delivery(1, "https://hooks.example.com/hook")
    try:
        hooks.start([hook])
        await until_done([hook], timeout=10.0)
    finally:
        await hooks.close()
    assert hook.status is DeliveryStatus.DELIVERED, hook.last_error
    assert body.pulled == read <= RESPONSE_READ_BYTES


async def public_address(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


def test_a_tenant_gets_a_quarter_of_the_slots_and_at_least_one() -> None:
    assert webhook_delivery.tenant_slots(16) == 4
    assert webhook_delivery.tenant_slots(4) == 1
    assert webhook_delivery.tenant_slots(1) == 1
