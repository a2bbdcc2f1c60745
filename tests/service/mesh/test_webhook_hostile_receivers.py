"""Webhooks through a real mesh to a receiver that drips its answer or sends a huge one: the
attempt is recorded failed (or, for a huge 200, delivered unread) within the timeout, and
another job's webhook to a well-behaved receiver arrives meanwhile."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from mediamesh.scheduler.store.deliveries import DeliveryStatus
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_webhooks import SECRET, echo, run_to_end, stored_deliveries
from tests.webhook_receiver import Receiver, webhook_receiver


@pytest.fixture
async def hostile() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r


@pytest.fixture
async def fine() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r


async def test_a_dripping_receiver_fails_its_attempt_on_time_and_holds_no_one_else_up(
    tmp_path, models_dir, hostile: Receiver, fine: Receiver
):
    hostile.mode, hostile.drip_interval_s = "drip", 0.5
    hooks = {
        "allowed_hosts": [f"127.0.0.1:{hostile.port}", f"127.0.0.1:{fine.port}"],
        "secrets": {"default": SECRET},
        "timeout_s": 1.5,
        "max_attempts": 1,
    }
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], webhooks=hooks)
    try:
        slow_job, _ = await run_to_end(mesh, echo(hostile, "completed"))
        await hostile.wait_for(1, timeout=10)
        ended = time.monotonic()
        fast_job, _ = await run_to_end(mesh, echo(fine, "completed"))
        (arrived,) = await fine.wait_for(1, timeout=10)
        assert arrived.at - ended < 1.0, "a well-behaved receiver waited for the dripping one"
        (failed,) = await stored_deliveries(mesh, slow_job, DeliveryStatus.FAILED)
        assert failed.last_error == "no complete answer within webhooks.timeout_s (1.5 s)"
        assert failed.finished_at is not None
        assert failed.finished_at - failed.created_at <= 1.5 + 1.0
        await stored_deliveries(mesh, fast_job, DeliveryStatus.DELIVERED)
    finally:
        await stop_mesh(mesh)


async def test_a_huge_answer_is_left_unread(tmp_path, models_dir, hostile: Receiver):
    hostile.mode, hostile.huge_bytes = "huge", 1500 * 2**20
    hooks = {
        "allowed_hosts": [f"127.0.0.1:{hostile.port}"],
        "secrets": {"default": SECRET},
        "max_attempts": 1,
    }
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], webhooks=hooks)
    try:
        job_id, _ = await run_to_end(mesh, echo(hostile, "completed"))
        (stored,) = await stored_deliveries(mesh, job_id, DeliveryStatus.DELIVERED)
        assert stored.finished_at is not None and stored.finished_at - stored.created_at < 3.0
        # Of 1500 MiB, what left the receiver is what the sockets' buffers took.
        assert hostile.body_bytes_sent < 16 * 2**20
    finally:
        await stop_mesh(mesh)
