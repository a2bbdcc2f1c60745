"""Client: the gateway from blocking code."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Unpack

from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.sdk.api.blocking import BlockingTransport
from mediamesh.sdk.base import ClientBase
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Event
from mediamesh.sdk.flow import (
    DOWNLOAD_ATTEMPTS,
    RESUMABLE_CODES,
    JobStream,
    checked_artifact,
    ended_early,
    is_final,
    keyed_failure,
    needs_download,
    out_of_order,
    overload_wait,
)
from mediamesh.sdk.options import GenerateOptions, GenerateParams, generate_params
from mediamesh.sdk.types import (
    Artifact,
    DeletedJob,
    JobHandle,
    JobInfo,
    JobPage,
    JobQuery,
    JobState,
    ModelInfo,
    UploadHandle,
)
from mediamesh.sdk.uploads import upload_source


class Client(ClientBase):
    """A blocking client of mediamesh.v1.Gateway over one channel; see ClientBase for the
    settings. Use it as a context manager, or call close(). Failed calls raise GatewayError.

        with Client("127.0.0.1:50051", api_key=key) as client:
            for event in client.generate("flux-tiny", "a red fox", steps=4):
                print(event)
    """

    _transport: BlockingTransport

    def _open(self) -> None:
        self._transport = BlockingTransport(self.settings)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel. Calls still open, and any made later, raise GatewayError
        CANCELLED saying the client is closed (naming the job of a generate or watch, which
        goes on)."""
        self._transport.close()

    def generate(
        self, model: str, prompt: str, **options: Unpack[GenerateOptions]
    ) -> Iterator[Event]:
        """Submit a job and yield its events: Queued, Progress, Notice, then one Result (with
        the whole artifact, downloaded if it was above the inline limit) or Error.

        Options are GenerateRequest's fields (steps, seed, width, height, num_frames,
        guidance_scale, duration_s, output_format, output_quality, fps, negative_prompt, priority,
        timeout_ms, idempotency_key).
        Nothing is sent until the first event is read.

        Once the job is accepted (every event carries its `job_id`), a stream that breaks off
        with the connection (UNAVAILABLE: a gateway restarted, a proxy dropped it) re-attaches
        with watch, for up to `reattach_s` without news; the events go on without repeats and
        the Result or Error comes once. A GatewayError raised after acceptance carries the
        `job_id`.

        Stopping early does not cancel the job: breaking out of the loop, a timeout or Ctrl-C
        only closes the stream, and the job runs on to its result. Stop it with
        `client.cancel(job_id)`.
        """
        params = generate_params(model, prompt, options)
        return self._follow(
            lambda stream: self._generate(params, stream),
            resendable=True,
            idempotency_key=params.idempotency_key,
        )

    def submit(self, model: str, prompt: str, **options: Unpack[GenerateOptions]) -> JobHandle:
        """Accept a job and return its handle at once; follow it with watch.

        A submit that fails before its answer (DEADLINE_EXCEEDED, UNAVAILABLE, ...) may have
        made the job all the same: its GatewayError carries the `idempotency_key` sent (the
        SDK makes one when none is given), and the same submit with
        `idempotency_key=error.idempotency_key` returns that job, or makes it, never a second.
        """
        params = generate_params(model, prompt, options)
        retries, waited_s = 0, 0.0
        while True:
            try:
                return self._transport.submit(params)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, waited_s, self.settings)
                if wait is None:
                    raise keyed_failure(exc, params.idempotency_key, "submit") from None
            retries, waited_s = retries + 1, waited_s + wait
            time.sleep(wait)

    def watch(self, job_id: str) -> Iterator[Event]:
        """Yield a job's events from its current state to its Result or Error (replayed at
        once for a job that already ended), re-attaching as generate does when the stream
        breaks off. Like generate, stopping early leaves the job running: see cancel."""
        return self._follow(lambda stream: self._transport.watch(job_id, stream), job_id=job_id)

    def cancel(self, job_id: str) -> JobInfo:
        """Cancel a job (a queued one at once, a running one at its next step); cancelling an
        ended job changes nothing and answers its state."""
        return self._transport.cancel(job_id)

    def delete_job(self, job_id: str) -> DeletedJob:
        """Delete an ended job before the mesh's retention would: its result and its record.
        The mesh forgets it (NOT_FOUND from then on) and frees its idempotency key. A job
        that has not ended is refused, FAILED_PRECONDITION: cancel it first."""
        return self._transport.delete_job(job_id)

    def get(self, job_id: str) -> JobInfo:
        """A job's current state."""
        return self._transport.get(job_id)

    def list_jobs(
        self,
        *,
        states: Iterable[JobState | str] = (),
        models: Iterable[str] = (),
        page_size: int = 0,
        after: str | None = None,
        oldest_first: bool = False,
    ) -> JobPage:
        """One page of the caller's jobs (every tenant's for an admin key), newest first
        unless `oldest_first`; continue with `after=page.last_id` while `page.has_more`.
        A job is listed until the mesh's result retention forgets it."""
        query = JobQuery.of(states, models, page_size, after, oldest_first)
        return self._transport.list_jobs(query)

    def iter_jobs(
        self,
        *,
        states: Iterable[JobState | str] = (),
        models: Iterable[str] = (),
        oldest_first: bool = False,
        after: str | None = None,
        page_size: int = MAX_JOB_PAGE_SIZE,
    ) -> Iterator[JobInfo]:
        """Every job `list_jobs` would list (after `after`), fetched `page_size` at a time
        as the caller reads on."""
        query = JobQuery.of(states, models, page_size, after, oldest_first)
        while True:
            page = self._transport.list_jobs(query)
            yield from page.jobs
            if not page.has_more or page.last_id is None:
                return
            query = dataclasses.replace(query, after=page.last_id)

    def list_models(self) -> list[ModelInfo]:
        """The registry's models with their limits and readiness."""
        return self._transport.list_models()

    def upload(self, source: bytes | str | Path, mime_type: str | None = None) -> UploadHandle:
        """Store an input image (bytes, or a file's path) of any size, streamed in chunks,
        and return its handle: pass `handle.input_id` as the image_id or mask_image_id option.
        The upload belongs to the caller's tenant and expires unless a job uses it."""
        return self._transport.upload(upload_source(source, mime_type))

    def download(self, job_id: str) -> Artifact:
        """A succeeded job's artifact, resumed from the bytes received if the stream breaks
        off, and checked against its SHA-256."""
        received = bytearray()
        mime_type = sha256 = ""
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            try:
                for chunk in self._transport.download(job_id, len(received)):
                    if chunk.offset != len(received):
                        raise out_of_order(job_id, chunk.offset, len(received))
                    received += chunk.data
                    mime_type, sha256 = chunk.mime_type, chunk.sha256
            except GatewayError as exc:
                # Nothing received: the call was never answered (the channel already retried
                # it), and timeout_s, its bound, is spent.
                if not received or exc.code not in RESUMABLE_CODES or attempt == DOWNLOAD_ATTEMPTS:
                    raise
                continue
            break
        return checked_artifact(job_id, bytes(received), mime_type, sha256)

    def _generate(self, params: GenerateParams, stream: JobStream) -> Iterator[Event]:
        # Admission is decided before the first event, so only then may an over-limit
        # answer be retried: nothing was accepted.
        retries, waited_s = 0, 0.0
        while True:
            events = self._transport.generate(params, stream)
            try:
                first = next(events, None)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, waited_s, self.settings)
                if wait is None or not stream.wait_out_overload(wait):
                    raise
                retries, waited_s = retries + 1, waited_s + wait
                time.sleep(wait)
                continue
            if first is not None:
                yield first
                yield from events
            return

    def _follow(
        self,
        open_events: Callable[[JobStream], Iterator[Event]],
        *,
        job_id: str = "",
        resendable: bool = False,
        idempotency_key: str = "",
    ) -> Iterator[Event]:
        """The events `open_events` opens, re-attached (or the request sent again) as the
        JobStream decides; it is also the limit every call of the follow is given up at."""
        stream = JobStream(
            self.settings, job_id=job_id, resendable=resendable, idempotency_key=idempotency_key
        )
        events = open_events(stream)
        while True:
            broken = yield from self._relay(events, stream)
            if broken is None:
                return
            wait = stream.reattach_wait(broken)
            if wait is None:
                raise stream.error_to_raise(broken)
            time.sleep(wait)
            if stream.job_id:
                events = self._transport.watch(stream.job_id, stream)
            else:
                events = open_events(stream)  # resendable: the same request, the same key

    def _relay(
        self, events: Iterator[Event], stream: JobStream
    ) -> Generator[Event, None, GatewayError | None]:
        """Yield one stream's news; None once the final event is out, else what broke it."""
        while True:
            try:
                event = next(events, None)
            except GatewayError as exc:
                return exc
            if event is None:
                return ended_early(stream.job_id)
            if not stream.is_news(event):
                continue
            if needs_download(event):
                try:
                    artifact = self.download(event.job_id)
                except GatewayError as exc:
                    exc.job_id = event.job_id
                    raise
                event = dataclasses.replace(event, data=artifact.data)
            yield event
            if is_final(event):
                return None
