"""Delivering webhooks: signed POSTs with exponential backoff, at least once, recorded.

Each event a job's webhook asked for becomes a `WebhookDelivery`, saved through the store
writer (a job's final event in the same transaction as the job's final state) and then
attempted until the receiver answers 2xx or `webhooks.max_attempts` is spent. Every attempt
is recorded, so a restarted scheduler resumes what was still pending (`start`). A receiver
may see an event twice (a crash between its answer and the record): the delivery id in
`X-Mediamesh-Delivery` lets it drop repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
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
from mediamesh.scheduler.webhook_policy import url_problem

log = logging.getLogger("mediamesh.scheduler.webhooks")

USER_AGENT = "mediamesh-webhooks/1"


class WebhookDeliverer:
    """Queues, signs, sends and retries the deliveries of every job's webhook."""

    def __init__(
        self,
        settings: WebhookSettings,
        writer: StoreWriter,
        artifacts: ArtifactStore,
        results: Mapping[str, StoredArtifact],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._writer = writer
        self._artifacts = artifacts
        # Results by job id, for the fresh result URL each attempt of "completed" carries.
        self._results = results
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(settings.max_concurrent)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, pending: list[WebhookDelivery]) -> None:
        """Resume the deliveries a previous run left pending."""
        if pending:
            log.info("resuming %d pending webhook deliveries", len(pending))
        for delivery in pending:
            self._spawn(delivery)

    async def close(self) -> None:
        """Stop delivering; what is pending stays recorded for the next start."""
        for task in self._tasks:
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            await self._client.aclose()

    # ---- events from the runtime ---------------------------------------------------------

    def job_ended(self, job: Job) -> None:
        """The job reached a terminal state: "completed" or "failed", if its webhook asked."""
        hook = job.delivery.webhook
        if hook is None:
            return
        event = "completed" if job.state is JobState.SUCCEEDED else "failed"
        if not hook.wants(event):
            return
        fields: dict[str, Any] = {}
        artifact = self._results.get(job.job_id)
        if event == "completed" and artifact is not None:
            fields["result"] = {
                "mime_type": artifact.mime_type,
                "size_bytes": artifact.size_bytes,
                "sha256": artifact.sha256,
                "seed": artifact.seed,
            }
        else:
            fields["error"] = {"code": job.error_code, "message": job.error_message}
        self._enqueue(job, event, fields)

    def progressed(self, job: Job, step: int, total_steps: int) -> None:
        """A step finished: a "progress" delivery, if the job's webhook asked for them."""
        hook = job.delivery.webhook
        if hook is not None and hook.wants("progress"):
            self._enqueue(
                job,
                "progress",
                {"progress": {"step": step, "total_steps": total_steps, "attempt": job.attempts}},
            )

    def _enqueue(self, job: Job, event: str, fields: dict[str, Any]) -> None:
        assert job.delivery.webhook is not None
        now = self._clock()
        delivery_id = uuid.uuid4().hex
        payload = {
            "id": delivery_id,
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
            delivery_id=delivery_id,
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
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, delivery: WebhookDelivery) -> None:
        while delivery.status is DeliveryStatus.PENDING:
            wait = delivery.next_attempt_at - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            async with self._slots:
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
        try:
            response = await self._http().post(delivery.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"

    async def _body(self, delivery: WebhookDelivery) -> bytes:
        """The recorded payload, with a result URL signed now for a "completed" event (one
        recorded with the payload could have expired by a late retry)."""
        payload = json.loads(delivery.payload)
        artifact = self._results.get(delivery.job_id)
        if delivery.event == "completed" and artifact is not None and "result" in payload:
            with contextlib.suppress(Exception):
                signed = await self._artifacts.signed_url(artifact.path)
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
            # No redirects: a receiver on the allowlist must not send us elsewhere.
            self._client = httpx.AsyncClient(
                timeout=self.settings.timeout_s, follow_redirects=False, trust_env=False
            )
        return self._client
