"""The gateway's calls over a grpc.aio channel, in SDK values; errors raise GatewayError."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from mediamesh.common.errors import StatusCode
from mediamesh.common.generated.v1 import gateway_pb2, gateway_pb2_grpc
from mediamesh.sdk.api import convert
from mediamesh.sdk.api.channel import (
    CONNECTION_PROBE_METHOD,
    CONNECTION_PROBE_TIMEOUT_S,
    aio_channel,
    call_metadata,
)
from mediamesh.sdk.errors import GatewayError
from mediamesh.sdk.events import Event
from mediamesh.sdk.flow import (
    FirstMessageLimit,
    StreamLimit,
    closed_client,
    resend_wait,
    unary_failure,
)
from mediamesh.sdk.options import ClientSettings, GenerateParams
from mediamesh.sdk.types import (
    Chunk,
    DeletedJob,
    JobHandle,
    JobInfo,
    JobPage,
    JobQuery,
    ModelInfo,
    UploadHandle,
)
from mediamesh.sdk.uploads import UploadSource

_T = TypeVar("_T")


def _cancelled_by_close(closed: bool) -> bool:
    """Whether a CancelledError raised by a call came from closing the client: grpc.aio
    cancels the calls of a channel that closes, while the task itself was not cancelled."""
    task = asyncio.current_task()
    return closed and task is not None and not task.cancelling()


class AsyncTransport:
    """One grpc.aio channel and stub; each method is one gateway call."""

    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        self._channel = aio_channel(settings)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = call_metadata(settings)
        self._closed = False

    async def close(self) -> None:
        """Close the channel, cancelling calls still open (they raise the closed error, as
        the blocking client's do, not CancelledError)."""
        self._closed = True
        await self._channel.close()

    def _opened(self, start: Callable[[], _T]) -> _T:
        """What `start` (a call) returns, unless the client is closed: grpc.aio would raise
        its own UsageError ("Channel is closed.")."""
        if self._closed:
            raise closed_client()
        try:
            return start()
        except grpc.aio.UsageError:
            if self._closed:
                raise closed_client() from None
            raise

    def _connected(self) -> bool:
        return self._channel.get_state() is grpc.ChannelConnectivity.READY

    async def _connection_error(self) -> str:
        """gRPC's account of the channel's last connection try, when the channel is between
        tries; "" when it tells none (see CONNECTION_PROBE_METHOD)."""
        probe: Any = self._channel.unary_unary(CONNECTION_PROBE_METHOD)
        try:
            await probe(b"", timeout=CONNECTION_PROBE_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                return exc.details() or ""
        except grpc.aio.UsageError:  # the client was closed meanwhile
            pass
        return ""

    async def _unary(self, method: Any, request: Any, resend: bool = True) -> Any:
        """The call's answer; with `resend`, sent again while answered UNAVAILABLE (see
        channel.RESENT_BY_THE_SDK_METHODS), up to 5 sends within timeout_s, then the last
        answer raised."""
        started = time.monotonic()
        timeout_s = self._settings.timeout_s
        deadline = None if timeout_s is None else started + timeout_s
        tries, answered = 0, None
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            call: Awaitable[Any] = self._opened(
                functools.partial(method, request, metadata=self._metadata, timeout=left)
            )
            try:
                return await call
            except grpc.aio.AioRpcError as exc:
                error = self._failure(exc)
            except asyncio.CancelledError:
                if _cancelled_by_close(self._closed):
                    raise closed_client() from None
                raise
            if self._closed:
                raise error from None
            wait = None
            if resend and error.code == StatusCode.UNAVAILABLE:
                answered = error
                wait = resend_wait(tries, deadline, time.monotonic())
            if wait is None:
                break
            await asyncio.sleep(wait)
            tries += 1
        if error.code == StatusCode.DEADLINE_EXCEEDED and answered is not None:
            error = answered  # the last send ran out of time: the answer before it says why
        connected = self._connected()
        tried_s = time.monotonic() - started
        cause = ""
        if not connected and error.code == StatusCode.DEADLINE_EXCEEDED:
            cause = await self._connection_error()
        raise unary_failure(error, self._settings.target, tried_s, connected, cause)

    def _failure(self, exc: grpc.aio.AioRpcError) -> GatewayError:
        return closed_client() if self._closed else convert.gateway_error(exc)

    async def _stream(
        self, method: Any, request: Any, limit: StreamLimit | None = None
    ) -> AsyncIterator[Any]:
        """The call's messages; with `limit` it has no gRPC deadline and is given up on this
        side (see StreamLimit), else stream_timeout_s is its deadline."""
        timeout_s = None if limit is not None else self._settings.stream_timeout_s
        call = self._opened(lambda: method(request, metadata=self._metadata, timeout=timeout_s))
        try:
            while True:
                # Asked before each read: the limit moves on once a job is accepted.
                left = None if limit is None else limit.seconds_left()
                if limit is None or left is None:
                    message = await call.read()
                else:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a
                    # cancellation that lands as the read completes, and the caller's task
                    # (`mediamesh batch` on Ctrl-C) then waited on the next event for ever.
                    try:
                        async with asyncio.timeout(max(left, 0.0)):
                            message = await call.read()
                    except TimeoutError:
                        connected = self._connected()
                        cause = "" if connected else await self._connection_error()
                        raise limit.expired(connected, cause) from None
                if message is grpc.aio.EOF:
                    return
                yield message
        except grpc.aio.AioRpcError as exc:
            error = self._failure(exc)
            if limit is not None and not self._closed:
                limit.failed(error, self._connected())
            raise error from None
        except asyncio.CancelledError:
            if _cancelled_by_close(self._closed):
                raise closed_client() from None
            raise
        finally:
            call.cancel()  # a caller that stops reading early must not leave the call open

    async def _events(
        self, method: Any, request: Any, limit: StreamLimit | None
    ) -> AsyncIterator[Event]:
        async for message in self._stream(method, request, limit):
            event = convert.event(message)
            if event is not None:
                yield event

    def generate(
        self, params: GenerateParams, limit: StreamLimit | None = None
    ) -> AsyncIterator[Event]:
        """Generate: submit, then the job's events, given up when `limit` runs out."""
        return self._events(self._stub.Generate, convert.generate_request(params), limit)

    def watch(self, job_id: str, limit: StreamLimit | None = None) -> AsyncIterator[Event]:
        """Watch: the job's current state, then its events to the end, given up when `limit`
        runs out."""
        request = gateway_pb2.WatchRequest(job_id=job_id)
        return self._events(self._stub.Watch, request, limit)

    async def submit(self, params: GenerateParams) -> JobHandle:
        """Submit: the job id at once."""
        reply = await self._unary(self._stub.Submit, convert.generate_request(params))
        return convert.job_handle(reply)

    async def cancel(self, job_id: str) -> JobInfo:
        """Cancel, answering the job's state after it."""
        reply = await self._unary(self._stub.Cancel, gateway_pb2.CancelRequest(job_id=job_id))
        return convert.job_info(reply)

    async def delete_job(self, job_id: str) -> DeletedJob:
        """DeleteJob."""
        request = gateway_pb2.DeleteJobRequest(job_id=job_id)
        # Not resent: after UNAVAILABLE the job may be deleted already (REFUSED_FIRST_METHODS).
        reply = await self._unary(self._stub.DeleteJob, request, resend=False)
        return convert.deleted_job(reply)

    async def get(self, job_id: str) -> JobInfo:
        """GetJob."""
        reply = await self._unary(self._stub.GetJob, gateway_pb2.GetJobRequest(job_id=job_id))
        return convert.job_info(reply)

    async def list_jobs(self, query: JobQuery) -> JobPage:
        """ListJobs: one page."""
        reply = await self._unary(self._stub.ListJobs, convert.list_jobs_request(query))
        return convert.job_page(reply)

    async def list_models(self) -> list[ModelInfo]:
        """ListModels."""
        reply = await self._unary(self._stub.ListModels, gateway_pb2.ListModelsRequest())
        return [convert.model_info(m) for m in reply.models]

    async def upload(self, source: UploadSource) -> UploadHandle:
        """Upload: the input in chunks, answered with its handle."""
        # Not resent: the chunks are read as they are sent.
        reply = await self._unary(self._stub.Upload, convert.upload_chunks(source), resend=False)
        return convert.upload_handle(reply)

    async def download(self, job_id: str, offset: int) -> AsyncIterator[Chunk]:
        """Download from a byte offset."""
        request = gateway_pb2.DownloadRequest(job_id=job_id, offset=offset)
        limit = FirstMessageLimit(self._settings)
        try:
            async for message in self._stream(self._stub.Download, request, limit):
                limit.received()
                yield convert.chunk(message)
        except GatewayError as error:
            raise limit.error_to_raise(error) from None
