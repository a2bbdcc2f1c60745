"""AsyncClient: the gateway from asyncio code."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from types import TracebackType
from typing import Unpack

from mediamesh.common.limits import MAX_JOB_PAGE_SIZE
from mediamesh.sdk.api.aio import AsyncTransport
from mediamesh.sdk.base import ClientBase
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Event
from mediamesh.sdk.flow import (
    DOWNLOAD_ATTEMPTS,
    RESUMABLE_CODES,
    checked_artifact,
    ended_early,
    is_final,
    needs_download,
    out_of_order,
    overload_wait,
)
from mediamesh.sdk.options import GenerateOptions, GenerateParams, generate_params
from mediamesh.sdk.types import (
    Artifact,
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
    the settings. Create it inside the event loop that uses it; use `async with`, or await
    close(). Failed calls raise GatewayError.

        async with AsyncClient("127.0.0.1:50051", api_key=key) as client:
            async for event in client.generate("flux-tiny", "a red fox", steps=4):
                print(event)
    """

    _transport: AsyncTransport

    def _open(self) -> None:
        self._transport = AsyncTransport(self.settings)

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
        """Close the channel; calls still open are cancelled."""
        await self._transport.close()

    def generate(
        self, model: str, prompt: str, **options: Unpack[GenerateOptions]
    ) -> AsyncIterator[Event]:
        """Submit a job and yield its events: Queued, Progress, Notice, then one Result (with
        the whole artifact, downloaded if it was above the inline limit) or Error.

        Options are GenerateRequest's fields, as for Client.generate. Nothing is sent until
        the first event is awaited.
        """
        params = generate_params(model, prompt, options)
        return self._follow(self._generate(params))

    async def submit(
        self, model: str, prompt: str, **options: Unpack[GenerateOptions]
    ) -> JobHandle:
        """Accept a job and return its handle at once; follow it with watch."""
        params = generate_params(model, prompt, options)
        retries = 0
        while True:
            try:
                return await self._transport.submit(params)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, self.settings)
                if wait is None:
                    raise
            retries += 1
            await asyncio.sleep(wait)

    def watch(self, job_id: str) -> AsyncIterator[Event]:
        """Yield a job's events from its current state to its Result or Error (replayed at
        once for a job that already ended)."""
        return self._follow(self._transport.watch(job_id))

    async def cancel(self, job_id: str) -> JobInfo:
        """Cancel a job (a queued one at once, a running one at its next step); cancelling an
        ended job changes nothing and answers its state."""
        return await self._transport.cancel(job_id)

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
    ) -> AsyncIterator[JobInfo]:
        """Every job `list_jobs` would list, fetched a page of 100 at a time."""
        query = JobQuery.of(states, models, MAX_JOB_PAGE_SIZE, None, oldest_first)
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
                if exc.code not in RESUMABLE_CODES or attempt == DOWNLOAD_ATTEMPTS:
                    raise
                continue
            break
        return checked_artifact(job_id, bytes(received), mime_type, sha256)

    async def _generate(self, params: GenerateParams) -> AsyncIterator[Event]:
        # Admission is decided before the first event, so only then may an over-limit
        # answer be retried: nothing was accepted.
        retries = 0
        while True:
            events = self._transport.generate(params)
            try:
                first = await anext(events, None)
            except GatewayError as exc:
                wait = overload_wait(exc, retries, self.settings)
                if wait is None:
                    raise
                retries += 1
                await asyncio.sleep(wait)
                continue
            if first is not None:
                yield first
                async for event in events:
                    yield event
            return

    async def _follow(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        job_id = ""
        async for event in events:
            job_id = event.job_id
            if needs_download(event):
                event = dataclasses.replace(event, data=(await self.download(job_id)).data)
            yield event
            if is_final(event):
                return
        raise ended_early(job_id)
