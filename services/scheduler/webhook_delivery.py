"""Delivering webhooks: signed POSTs with exponential backoff, at least once, recorded.

Each event a job's webhook asked for becomes a `WebhookDelivery`, saved through the store
writer (a job's final event in the same transaction as the job's final state) and then
attempted until the receiver answers 2xx or `webhooks.max_attempts` is spent. Every attempt
is recorded, so a restarted scheduler resumes what was still pending (`start`). A receiver
may see an event twice (a crash between its answer and the record, or between a job's end
and its record, after which the job runs again and ends anew): the delivery id in
`X-Mediamesh-Delivery` lets it drop repeats, since it is made from the job and the event
(`delivery_id`), never drawn at random, so the repeat carries the id of the first.

A receiver is a tenant's, so it is not trusted to answer well. One attempt, from resolving
the host to the answer's last byte read, has `webhooks.timeout_s` in all (not per read: a
receiver that sends a byte every few seconds would hold a slot for ever); only the status
decides, and no more than RESPONSE_READ_BYTES of the body is ever read (a small one, so that
the connection can serve the next attempt). Deliveries in flight are bounded by
`webhooks.max_concurrent`, and one tenant's by a share of those (`tenant_slots`), so one
tenant's slow receiver cannot hold back the others'. The host's addresses are checked
before each attempt, which connects to those and no others (webhook_policy, webhook_transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.common.webhook_signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature_header,
)
from mediamesh.scheduler import metrics
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.store.artifacts import ArtifactStore, StoredArtifact
from mediamesh.scheduler.store.deliveries import DeliveryStatus, WebhookDelivery
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_policy import (
    address_problem,
    host_and_port,
    matching_entries,
    url_problem,
)
from mediamesh.scheduler.webhook_transport import (
    connect_host,
    pinned,
    resolve,
    webhook_client,
)

log = logging.getLogger("mediamesh.scheduler.webhooks")

USER_AGENT = "mediamesh-webhooks/1"
# The most of a receiver's answer body ever read: only its status matters. A body declared no
# longer is read to its end, so that the connection can be used again; any other is not read.
RESPONSE_READ_BYTES = 64 * 1024
# One tenant's deliveries in flight are at most this share of `max_concurrent` (at least 1).
TENANT_SHARE = 4


# The namespace of delivery ids (uuid5): any fixed UUID would do, but never change it, or a
# repeat sent by a newer scheduler would not carry the id its receiver already has.
DELIVERY_ID_NAMESPACE = uuid.UUID("5b0f5d2e-7c1a-4f43-9a57-2f0c8e3d6a41")


def delivery_id(job_id: str, event: str, progress: tuple[int, int] | None = None) -> str:
    """The delivery id of the job's `event` (for "progress", of its (attempt, step)): the
    same whenever that notice is sent again, so its receiver can tell it is a repeat."""
    name = (
        f"{job_id}/{event}" if progress is None else f"{job_id}/{event}/{progress[0]}/{progress[1]}"
    )
    return uuid.uuid5(DELIVERY_ID_NAMESPACE, name).hex


def tenant_slots(max_concurrent: int) -> int:
    """Deliveries one tenant may have in flight at once."""
    return max(1, max_concurrent // TENANT_SHARE)


async def _no_artifact(job_id: str) -> StoredArtifact | None:
    return None


class WebhookDeliverer:
    """Queues, signs, sends and retries the deliveries of every job's webhook."""

    def __init__(
        self,
        settings: WebhookSettings,
        writer: StoreWriter,
        artifacts: ArtifactStore,
        artifact_of: Callable[[str], Awaitable[StoredArtifact | None]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._writer = writer
        self._artifacts = artifacts
        # A job's stored result, for the fresh result URL each attempt of "completed"
        # carries (a late retry may find the job read back from the store).
        self._artifact_of = artifact_of or _no_artifact
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(settings.max_concurrent)
        # Per tenant, taken before a global slot: waiting for its own, a tenant whose
        # receiver is slow does not queue ahead of the others for the global ones.
        self._tenant_slots: dict[str, asyncio.Semaphore] = {}
        # How each attempt finds a host's addresses (tests replace it).
        self.resolve = resolve
        # Each pending delivery's task, and the delivery.
        self._tasks: dict[asyncio.Task[None], WebhookDelivery] = {}

    def start(self, pending: list[WebhookDelivery]) -> None:
        """Resume the deliveries a previous run left pending."""
        if pending:
            log.info("resuming %d pending webhook deliveries", len(pending))
        for delivery in pending:
            self._spawn(delivery)

    async def close(self) -> None:
        """Stop delivering; what is pending stays recorded for the next start."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            await self._client.aclose()

    # ---- events from the runtime ---------------------------------------------------------

    def job_ended(self, job: Job, artifact: StoredArtifact | None) -> None:
        """The job reached a terminal state: "completed" or "failed", if its webhook asked;
        `artifact` is its result, if it has one."""
        hook = job.delivery.webhook
        if hook is None:
            return
        event = "completed" if job.state is JobState.SUCCEEDED else "failed"
        if not hook.wants(event):
            return
        fields: dict[str, Any] = {}
        if event == "completed" and artifact is not None:
            fields["result"] = {
                "mime_type": artifact.mime_type,
                "size_bytes": artifact.size_bytes,
                "sha256": artifact.sha256,
                "seed": artifact.seed,
            }
        else:
            fields["error"] = {"code": job.error_code, "message": job.error_message}
        self._enqueue(job, event, fields, delivery_id(job.job_id, event))

    def progressed(self, job: Job, step: int, total_steps: int) -> None:
        """A step finished: a "progress" delivery, if the job's webhook asked for them."""
        hook = job.delivery.webhook
        if hook is not None and hook.wants("progress"):
            self._enqueue(
                job,
                "progress",
                {"progress": {"step": step, "total_steps": total_steps, "attempt": job.attempts}},
                delivery_id(job.job_id, "progress", (job.attempts, step)),
            )

    def _enqueue(self, job: Job, event: str, fields: dict[str, Any], identity: str) -> None:
        """Record and send a delivery of `event` whose delivery id is `identity`."""
        assert job.delivery.webhook is not None
        now = self._clock()
        payload = {
            "id": identity,
            "event": event,
            "created_unix_ms": int(now * 1000),
            "job": {
                "job_id": job.job_id,
                "tenant": job.tenant,
                "model": job.model,
                "state": job.state.value,
            },
            **fields,
        }
        delivery = WebhookDelivery(
            delivery_id=identity,
            job_id=job.job_id,
            tenant=job.tenant,
            url=job.delivery.webhook.url,
            event=event,
            payload=json.dumps(payload, separators=(",", ":")),
            created_at=now,
            next_attempt_at=now,
        )
        # Saved now, on the loop, right after the job's own state: one transaction.
        self._writer.save_delivery(delivery)
        self._spawn(delivery)

    # ---- sending -------------------------------------------------------------------------

    def _spawn(self, delivery: WebhookDelivery) -> None:
        task = asyncio.ensure_future(self._deliver(delivery))
        self._tasks[task] = delivery
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    def abandon(self, job_id: str) -> None:
        """Stop the job's pending deliveries (it is being deleted: nothing about it is to be
        sent or kept any more)."""
        for task, delivery in list(self._tasks.items()):
            if delivery.job_id == job_id:
                task.cancel()

    async def _deliver(self, delivery: WebhookDelivery) -> None:
        while delivery.status is DeliveryStatus.PENDING:
            wait = delivery.next_attempt_at - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            tenant = self._tenant_slots.get(delivery.tenant)
            if tenant is None:
                tenant = asyncio.Semaphore(tenant_slots(self.settings.max_concurrent))
                self._tenant_slots[delivery.tenant] = tenant
            async with tenant, self._slots:
                error = await self._attempt(delivery)
            self._record(delivery, error)

    async def _attempt(self, delivery: WebhookDelivery) -> str | None:
        """Send once; None when the receiver took it, else why not."""
        problem = url_problem(delivery.url, self.settings.allowed_hosts)
        secret = self.settings.secrets.get(delivery.tenant)
        if problem or secret is None:
            # The configuration changed since the job was accepted: never send it now.
            delivery.attempts = self.settings.max_attempts - 1
            return problem or f"tenant {delivery.tenant!r} has no secret any more"
        body = await self._body(delivery)
        timestamp = int(self._clock())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            EVENT_HEADER: delivery.event,
            DELIVERY_HEADER: delivery.delivery_id,
            SIGNATURE_HEADER: signature_header(secret.get_secret_value(), timestamp, body),
        }
        limit = self.settings.timeout_s
        try:
            async with asyncio.timeout(limit):
                status = await self._send(delivery.url, body, headers)
        except TimeoutError:
            return f"no complete answer within webhooks.timeout_s ({limit:g} s)"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        except RefusedAddress as exc:
            return str(exc)
        except Exception as exc:  # a failed attempt, never a dead delivery task
            log.warning("webhook delivery %s: attempt failed", delivery.delivery_id, exc_info=True)
            return f"{type(exc).__name__}: {exc}"
        if 200 <= status < 300:
            return None
        return f"HTTP {status}"

    async def _send(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST `body` to `url`, connecting only to addresses that passed the policy; the
        answer's status. Reads at most RESPONSE_READ_BYTES of the answer's body."""
        host, port = host_and_port(url)
        entries = matching_entries(host, port, self.settings.allowed_hosts)
        name = connect_host(url)
        try:
            addresses = await self.resolve(name, port)
        except OSError as exc:
            raise RefusedAddress(f"host {host!r} does not resolve ({exc})") from None
        if problem := address_problem(host, entries, addresses):
            raise RefusedAddress(problem)
        with pinned(name, port, addresses):
            async with self._http().stream("POST", url, content=body, headers=headers) as answer:
                declared = answer.headers.get("content-length", "")
                if (
                    declared.isascii()
                    and declared.isdigit()
                    and int(declared) <= RESPONSE_READ_BYTES
                ):
                    read = 0
                    async for chunk in answer.aiter_raw():
                        read += len(chunk)
                        if read >= RESPONSE_READ_BYTES:
                            break
                # Otherwise left unread: closing the answer closes its connection.
                return answer.status_code

    async def _body(self, delivery: WebhookDelivery) -> bytes:
        """The recorded payload, with a result URL signed now for a "completed" event (one
        recorded with the payload could have expired by a late retry)."""
        payload = json.loads(delivery.payload)
        if delivery.event == "completed" and "result" in payload:
            with contextlib.suppress(Exception):
                artifact = await self._artifact_of(delivery.job_id)
                signed = await self._artifacts.signed_url(artifact.path) if artifact else None
                if signed is not None:
                    payload["result"]["url"] = signed.url
                    payload["result"]["url_expires_unix_ms"] = signed.expires_unix_ms
        return json.dumps(payload, separators=(",", ":")).encode()

    def _record(self, delivery: WebhookDelivery, error: str | None) -> None:
        now = self._clock()
        delivery.attempts += 1
        if error is None:
            metrics.WEBHOOK_ATTEMPTS.labels("delivered").inc()
            delivery.status = DeliveryStatus.DELIVERED
            delivery.finished_at = now
            delivery.last_error = ""
        elif delivery.attempts >= self.settings.max_attempts:
            metrics.WEBHOOK_ATTEMPTS.labels("given_up").inc()
            delivery.status = DeliveryStatus.FAILED
            delivery.finished_at = now
            delivery.last_error = error
            log.warning(
                "webhook delivery %s (%s of job %s) given up after %d attempts: %s",
                delivery.delivery_id,
                delivery.event,
                delivery.job_id,
                delivery.attempts,
                error,
            )
        else:
            metrics.WEBHOOK_ATTEMPTS.labels("retry").inc()
            delivery.last_error = error
            delivery.next_attempt_at = now + self.backoff_s(delivery.attempts)
            log.info(
                "webhook delivery %s (%s of job %s) failed (%s); attempt %d in %.1f s",
                delivery.delivery_id,
                delivery.event,
                delivery.job_id,
                error,
                delivery.attempts + 1,
                delivery.next_attempt_at - now,
            )
        self._writer.save_delivery(delivery)

    def backoff_s(self, attempts: int) -> float:
        """Wait after the `attempts`-th failure: doubling from first_backoff_s, bounded."""
        s = self.settings
        # The exponent is bounded first: a float past 2**1023 overflows before any cap.
        doublings = min(max(attempts - 1, 0), 64)
        return float(min(s.first_backoff_s * 2.0**doublings, s.max_backoff_s))

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = webhook_client(self.settings.timeout_s)
        return self._client


class RefusedAddress(Exception):
    """The webhook's host resolves to no address the policy lets the mesh call."""
