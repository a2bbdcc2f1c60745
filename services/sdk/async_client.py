"""AsyncClient: the gateway from asyncio code."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Unpack

from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.sdk.api.aio import AsyncTransport
from mediamesh.sdk.base import ClientBase
from mediamesh.sdk.errors import EventLoopError, GatewayError
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


class AsyncClient(ClientBase):
    """An asyncio client of mediamesh.v1.Gateway over one grpc.aio channel; see ClientBase for
    the settings. Use `async with`, or await close(). Failed calls raise GatewayError.

        async def main() -> None:
            async with AsyncClient("127.0.0.1:50051", api_key=key) as client:
                async for event in client.generate("flux-tiny", "a red fox", steps=4):
                    print(event)

        asyncio.run(main())

    The channel belongs to the event loop it was created in: create the client inside that
    loop, as above, never at module level nor for several `asyncio.run`s. Constructing it
    without a running loop, or calling it from another loop, raises EventLoopError (a
    RuntimeError) saying so. Blocking code has Client.
    """

    _loop: asyncio.AbstractEventLoop
    _channel_calls: AsyncTransport

    def _open(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            # grpc.aio would take (or make) a loop that asyncio.run then does not run, and
            # fail only at the first call, with "Future attached to a different loop".
            raise EventLoopError(
                "AsyncClient needs a running event loop: create the AsyncClient inside the "
                "event loop that uses it, e.g. `async with AsyncClient(...) as client:` in the "
                "coroutine given to asyncio.run (or use the blocking Client)"
            ) from None
        self._channel_calls = AsyncTransport(self.settings)

    @property
    def _transport(self) -> AsyncTransport:
        """The calls, from the loop the client was created in; EventLoopError from another."""
        # Every call passes here, so none can reach the channel from the wrong loop.
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            # A later asyncio.run has a new loop; the channel's is closed ("Event loop is
            # closed") or not running, and cannot be moved.
            raise EventLoopError(
                "this AsyncClient was created in another event loop (an earlier asyncio.run?): "
                "create the AsyncClient inside the event loop that uses it, e.g. "
                "`async with AsyncClient(...) as client:` in each asyncio.run"
            )
        return self._channel_calls

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel. Calls still open, and any made later, raise GatewayError
        CANCELLED saying the client is closed (naming the job of a generate or watch, which
        goes on), as Client's do; a task reading one is not cancelled."""
        await self._transport.close()

    def generate(
        self, model: str, prompt: str, **options: Unpack[GenerateOptions]
    ) -> AsyncIterator[Event]:
        """Submit a job and yield its events: Queued, Progress, Notice, then one Result (with
        the whole artifact, downloaded if it was above the inline limit) or Error.

        Options are GenerateRequest's fields, as for Client.generate. Nothing is sent until
        the first event is awaited. A stream that breaks off with the connection after the
        job was accepted re-attaches with watch, and a GatewayError raised after acceptance
        carries the `job_id`, as for Client.generate.

        Stopping early does not cancel the job: breaking out of the loop, a timeout
        (`asyncio.timeout`, `wait_for`) or cancelling the task only closes the stream, and
        the job runs on to its result. Stop it with `await client.cancel(job_id)`.
        """
        params = generate_params(model, prompt, options)
        return self._follow(
            lambda stream: self._generate(params, stream),
            resendable=True,
            idempotency_key=params.idempotency_key,
        )

    async def submit(
        self, model: str, prompt: str, **options: Unpack[GenerateOptions]
    ) -> JobHandle:
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
                return await self._transport.submit(params)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, waited_s, self.settings)
                if wait is None:
                    raise keyed_failure(exc, params.idempotency_key, "submit") from None
            retries, waited_s = retries + 1, waited_s + wait
            await asyncio.sleep(wait)

    def watch(self, job_id: str) -> AsyncIterator[Event]:
        """Yield a job's events from its current state to its Result or Error (replayed at
        once for a job that already ended), re-attaching as generate does when the stream
        breaks off. Like generate, stopping early leaves the job running: see cancel."""
        return self._follow(lambda stream: self._transport.watch(job_id, stream), job_id=job_id)

    async def cancel(self, job_id: str) -> JobInfo:
        """Cancel a job (a queued one at once, a running one at its next step); cancelling an
        ended job changes nothing and answers its state."""
        return await self._transport.cancel(job_id)

    async def delete_job(self, job_id: str) -> DeletedJob:
        """Delete an ended job and its result (see Client.delete_job)."""
        return await self._transport.delete_job(job_id)

    async def get(self, job_id: str) -> JobInfo:
        """A job's current state."""
        return await self._transport.get(job_id)

    async def list_jobs(
        self,
        *,
        states: Iterable[JobState | str] = (),
        models: Iterable[str] = (),
        page_size: int = 0,
        after: str | None = None,
        oldest_first: bool = False,
    ) -> JobPage:
        """One page of the caller's jobs (see Client.list_jobs)."""
        query = JobQuery.of(states, models, page_size, after, oldest_first)
        return await self._transport.list_jobs(query)

    async def iter_jobs(
        self,
        *,
        states: Iterable[JobState | str] = (),
        models: Iterable[str] = (),
        oldest_first: bool = False,
        after: str | None = None,
        page_size: int = MAX_JOB_PAGE_SIZE,
    ) -> AsyncIterator[JobInfo]:
        """Every job `list_jobs` would list (after `after`), fetched `page_size` at a time
        as the caller reads on."""
        query = JobQuery.of(states, models, page_size, after, oldest_first)
        while True:
            page = await self._transport.list_jobs(query)
            for job in page.jobs:
                yield job
            if not page.has_more or page.last_id is None:
                return
            query = dataclasses.replace(query, after=page.last_id)

    async def list_models(self) -> list[ModelInfo]:
        """The registry's models with their limits and readiness."""
        return await self._transport.list_models()

    async def upload(
        self, source: bytes | str | Path, mime_type: str | None = None
    ) -> UploadHandle:
        """Store an input image (bytes, or a file's path) of any size, streamed in chunks;
        pass `handle.input_id` as the image_id or mask_image_id option (see Client.upload)."""
        prepared = await asyncio.to_thread(upload_source, source, mime_type)
        return await self._transport.upload(prepared)

    async def download(self, job_id: str) -> Artifact:
        """A succeeded job's artifact, resumed from the bytes received if the stream breaks
        off, and checked against its SHA-256."""
        received = bytearray()
        mime_type = sha256 = ""
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            try:
                async for chunk in self._transport.download(job_id, len(received)):
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

    async def _generate(self, params: GenerateParams, stream: JobStream) -> AsyncIterator[Event]:
        # Admission is decided before the first event, so only then may an over-limit
        # answer be retried: nothing was accepted.
        retries, waited_s = 0, 0.0
        while True:
            events = self._transport.generate(params, stream)
            try:
                first = await anext(events, None)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, waited_s, self.settings)
                if wait is None or not stream.wait_out_overload(wait):
                    raise
                retries, waited_s = retries + 1, waited_s + wait
                await asyncio.sleep(wait)
                continue
            if first is not None:
                yield first
                async for event in events:
                    yield event
            return

    async def _follow(
        self,
        open_events: Callable[[JobStream], AsyncIterator[Event]],
        *,
        job_id: str = "",
        resendable: bool = False,
        idempotency_key: str = "",
    ) -> AsyncIterator[Event]:
        """The events `open_events` opens, re-attached (or the request sent again) as the
        JobStream decides; it is also the limit every call of the follow is given up at."""
        stream = JobStream(
            self.settings, job_id=job_id, resendable=resendable, idempotency_key=idempotency_key
        )
        events = open_events(stream)
        while True:
            try:
                event = await anext(events, None)
            except GatewayError as exc:
                broken: GatewayError | None = exc
            else:
                broken = ended_early(stream.job_id) if event is None else None
            if broken is not None:
                wait = stream.reattach_wait(broken)
                if wait is None:
                    raise stream.error_to_raise(broken)
                await asyncio.sleep(wait)
                if stream.job_id:
                    events = self._transport.watch(stream.job_id, stream)
                else:
                    events = open_events(stream)  # resendable: the same request, the same key
                continue
            assert event is not None
            if not stream.is_news(event):
                continue
            if needs_download(event):
                try:
                    artifact = await self.download(event.job_id)
                except GatewayError as exc:
                    exc.job_id = event.job_id
                    raise
                event = dataclasses.replace(event, data=artifact.data)
            yield event
            if is_final(event):
                return
