"""Webhooks through a real mesh: signed deliveries to a receiver on loopback, a retry after a
failed delivery, the allowlist, progress only when asked, and a pending delivery resumed by
a restarted scheduler from the job store."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.webhook_signing import verify
from mediamesh.scheduler.store.deliveries import DeliveryStatus, WebhookDelivery
from tests.conftest import ROOT
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.webhook_receiver import Receiver, webhook_receiver

SECRET = "whsec-test"


def hook_settings(receiver: Receiver, **overrides: object) -> dict:
    return {
        "allowed_hosts": [f"127.0.0.1:{receiver.port}"],
        "secrets": {"default": SECRET},
        "first_backoff_s": 0.2,
        "max_backoff_s": 0.4,
        **overrides,
    }


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r


async def mesh_for(tmp_path: Path, models_dir: Path, receiver: Receiver, **hooks) -> InProcessMesh:
    return await start_mesh(
        tmp_path, models_dir, [["echo"]], webhooks=hook_settings(receiver, **hooks)
    )


def echo(receiver: Receiver, *events: str, **fields) -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(
        model="echo",
        prompt="hook",
        seed=5,
        webhook=common_pb2.Webhook(url=receiver.url, events=list(events)),
        **fields,
    )


async def run_to_end(mesh: InProcessMesh, request: common_pb2.GenerateRequest):
    events = [e async for e in mesh.gateway_stub().Generate(request)]
    return events[0].job_id, events[-1]


async def stored_deliveries(
    mesh: InProcessMesh, job_id: str, until_status: DeliveryStatus, count: int = 1
) -> list[WebhookDelivery]:
    """The job's deliveries once `count` of them have `until_status` in the store."""
    runtime = mesh.scheduler.runtime
    for _ in range(200):
        await runtime.writer.flush(5.0)
        rows = await runtime.store.deliveries_of(job_id)
        if sum(d.status is until_status for d in rows) >= count:
            return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"deliveries of {job_id} never reached {until_status}: {rows}")


def readme_verifier():
    """The `verified` function of the README's Webhooks section, as a receiver copies it."""
    section = (ROOT / "README.md").read_text().split("### Webhooks", 1)[1].split("\n### ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the README's Webhooks section must show how to verify a signature"
    namespace: dict = {}
    exec(found.group(1), namespace)
    return namespace["verified"]


async def test_a_completed_job_is_delivered_once_signed_with_the_tenant_secret(
    tmp_path, models_dir, receiver
):
    mesh = await mesh_for(tmp_path, models_dir, receiver)
    try:
        job_id, last = await run_to_end(mesh, echo(receiver, "completed"))
        (hook,) = await receiver.wait_for(1)
        assert hook.path == "/hook"
        assert hook.headers["x-mediamesh-event"] == "completed"
        assert hook.headers["content-type"] == "application/json"
        assert verify(SECRET, hook.headers["x-mediamesh-signature"], hook.body, time.time())
        assert not verify("another-secret", hook.headers["x-mediamesh-signature"], hook.body, 0)
        verified = readme_verifier()
        assert verified(SECRET, hook.headers["x-mediamesh-signature"], hook.body)
        assert not verified(SECRET, hook.headers["x-mediamesh-signature"], hook.body + b"x")
        body = json.loads(hook.body)
        assert body["id"] == hook.headers["x-mediamesh-delivery"]
        assert body["event"] == "completed"
        assert body["job"] == {
            "job_id": job_id,
            "tenant": "default",
            "model": "echo",
            "state": "SUCCEEDED",
        }
        assert body["result"]["sha256"] == hashlib.sha256(last.result.data).hexdigest()
        assert body["result"]["mime_type"] == "image/png"
        assert "url" not in body["result"]  # the local backend signs no URLs
        (stored,) = await stored_deliveries(mesh, job_id, DeliveryStatus.DELIVERED)
        assert stored.attempts == 1 and stored.delivery_id == body["id"]
        await asyncio.sleep(0.5)
        assert len(receiver.received) == 1  # no progress, no repeat
    finally:
        await stop_mesh(mesh)


def attempts_counted(outcome: str) -> float:
    sample = REGISTRY.get_sample_value("mediamesh_webhook_attempts_total", {"outcome": outcome})
    return sample or 0.0


async def test_a_delivery_answered_500_is_retried_after_a_backoff(tmp_path, models_dir, receiver):
    receiver.statuses = [500]
    retries = attempts_counted("retry")
    mesh = await mesh_for(tmp_path, models_dir, receiver)
    try:
        job_id, _ = await run_to_end(mesh, echo(receiver))
        first, second = await receiver.wait_for(2)
        assert first.headers["x-mediamesh-delivery"] == second.headers["x-mediamesh-delivery"]
        assert first.body == second.body
        assert second.at - first.at >= 0.19  # first_backoff_s
        assert verify(SECRET, second.headers["x-mediamesh-signature"], second.body, time.time())
        (stored,) = await stored_deliveries(mesh, job_id, DeliveryStatus.DELIVERED)
        assert stored.attempts == 2 and stored.last_error == ""
        assert attempts_counted("retry") == retries + 1
    finally:
        await stop_mesh(mesh)


async def test_progress_only_when_asked_and_a_cancelled_job_is_failed(
    tmp_path, models_dir, receiver
):
    mesh = await mesh_for(tmp_path, models_dir, receiver)
    try:
        stub = mesh.gateway_stub()
        _, last = await run_to_end(mesh, echo(receiver, "progress", "completed", steps=3))
        assert last.state == common_pb2.SUCCEEDED
        hooks = await receiver.wait_for(4)
        bodies = [json.loads(h.body) for h in hooks]
        progress = sorted(b["progress"]["step"] for b in bodies if b["event"] == "progress")
        assert progress == [1, 2, 3]
        assert [b["event"] for b in bodies].count("completed") == 1
        # No worker serves flux-tiny: the job waits until cancelled, then "failed" is sent.
        handle = await stub.Submit(
            common_pb2.GenerateRequest(
                model="flux-tiny",
                prompt="never runs",
                webhook=common_pb2.Webhook(url=receiver.url, events=["failed"]),
            )
        )
        await stub.Cancel(gateway_pb2.CancelRequest(job_id=handle.job_id))
        hooks = await receiver.wait_for(5)
        failed = json.loads(hooks[4].body)
        assert failed["event"] == "failed" and failed["job"]["state"] == "CANCELLED"
        assert failed["error"]["code"] == "CANCELLED"
        await asyncio.sleep(0.3)
        assert len(receiver.received) == 5
    finally:
        await stop_mesh(mesh)


async def test_webhooks_off_the_allowlist_or_with_unknown_events_are_refused(
    tmp_path, models_dir, receiver
):
    mesh = await mesh_for(tmp_path, models_dir, receiver)
    stub = mesh.gateway_stub()
    refused = {
        "https://internal.example/hook": "webhook.url: host 'internal.example' is not in "
        "webhooks.allowed_hosts",
        f"http://127.0.0.1:{receiver.port + 1}/hook": "is not in webhooks.allowed_hosts",
        "http://10.0.0.8/hook": "webhook.url: must use https",
    }
    try:
        for url, message in refused.items():
            request = common_pb2.GenerateRequest(
                model="echo", prompt="x", webhook=common_pb2.Webhook(url=url)
            )
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Submit(request)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert message in (error.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Submit(echo(receiver, "started"))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.value.details() or "").startswith("webhook.events")
        assert mesh.core.jobs == {} and receiver.received == []
    finally:
        await stop_mesh(mesh)


async def test_a_tenant_without_a_secret_cannot_use_webhooks(tmp_path, models_dir, receiver):
    mesh = await mesh_for(tmp_path, models_dir, receiver, secrets={})
    try:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await mesh.gateway_stub().Submit(echo(receiver))
        assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "webhooks.secrets.default" in (error.value.details() or "")
    finally:
        await stop_mesh(mesh)


async def test_a_pending_delivery_is_resumed_by_a_restarted_scheduler(
    tmp_path, models_dir, receiver
):
    receiver.default_status = 503
    mesh = await mesh_for(tmp_path, models_dir, receiver, max_attempts=100)
    try:
        job_id, _ = await run_to_end(mesh, echo(receiver))
        (failed, *_) = await receiver.wait_for(1)
        (pending,) = await stored_deliveries(mesh, job_id, DeliveryStatus.PENDING)
        while pending.attempts == 0:
            (pending,) = await stored_deliveries(mesh, job_id, DeliveryStatus.PENDING)
        assert pending.last_error == "HTTP 503"
    finally:
        await stop_mesh(mesh)
    seen = len(receiver.received)
    receiver.default_status = 200
    mesh = await mesh_for(tmp_path, models_dir, receiver, max_attempts=100)
    try:
        resumed = (await receiver.wait_for(seen + 1))[-1]
        assert resumed.headers["x-mediamesh-delivery"] == failed.headers["x-mediamesh-delivery"]
        assert resumed.body == failed.body
        (stored,) = await stored_deliveries(mesh, job_id, DeliveryStatus.DELIVERED)
        assert stored.attempts == seen + 1
    finally:
        await stop_mesh(mesh)
