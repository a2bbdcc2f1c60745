"""The gateway's calls over a grpc blocking channel, in SDK values; errors raise GatewayError."""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from mediamesh.common.errors import StatusCode
from mediamesh.common.generated.v1 import gateway_pb2, gateway_pb2_grpc
from mediamesh.sdk.api import convert
from mediamesh.sdk.api.channel import (
    CONNECTION_PROBE_METHOD,
    CONNECTION_PROBE_TIMEOUT_S,
    blocking_channel,
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


class _Expiry:
    """Cancels a streaming call once its StreamLimit runs out: there is no timed read on a
    blocking stream, and a gRPC deadline would reach the gateway as the job's deadline."""

    def __init__(self, call: grpc.Future[Any], limit: StreamLimit) -> None:
        self._call, self._limit = call, limit
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._stopped = False
        self.fired = False
        with self._lock:
            self._arm()

    def _arm(self) -> None:
        left = self._limit.seconds_left()
        if left is None:
            return
        self._timer = threading.Timer(max(left, 0.0), self._check)
        self._timer.daemon = True
        self._timer.start()

    def _check(self) -> None:
        with self._lock:
            if self._stopped:
                return
            left = self._limit.seconds_left()
            if left is None or left > 0:
                self._arm()  # the limit moved on meanwhile (a job was accepted)
                return
            self.fired = True
        self._call.cancel()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()


class BlockingTransport:
    """One channel and stub; each method is one gateway call."""

    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        self._channel = blocking_channel(settings)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = call_metadata(settings)
        self._closed = False

    def close(self) -> None:
        """Close the channel, cancelling calls still open."""
        self._closed = True
        self._channel.close()

    def _failure(self, exc: grpc.RpcError) -> GatewayError:
        """The SDK's error for a failed call: once the client is closed, grpc's own (the call
        CANCELLED, "Channel closed!") says less than that."""
        return closed_client() if self._closed else convert.gateway_error(exc)

    def _opened(self, start: Callable[[], _T]) -> _T:
        """What `start` (a call) returns, unless the client is closed: grpc would raise its own
        ValueError ("Cannot invoke RPC on closed channel!")."""
        if self._closed:
            raise closed_client()
        try:
            return start()
        except ValueError:
            if self._closed:  # closed by another thread meanwhile
                raise closed_client() from None
            raise

    def _connected(self) -> bool:
        """Whether the channel is connected to the gateway (READY). The blocking channel
        tells its state only to a subscriber, at once from a thread it starts for that."""
        states: queue.SimpleQueue[grpc.ChannelConnectivity] = queue.SimpleQueue()
        deliver = states.put
        self._channel.subscribe(deliver, try_to_connect=False)
        try:
            return states.get(timeout=1.0) is grpc.ChannelConnectivity.READY
        except queue.Empty:
            return False
        finally:
            self._channel.unsubscribe(deliver)

    def _connection_error(self) -> str:
        """gRPC's account of the channel's last connection try, when the channel is between
        tries; "" when it tells none (see CONNECTION_PROBE_METHOD)."""
        probe: Any = self._channel.unary_unary(CONNECTION_PROBE_METHOD)
        try:
            probe(b"", timeout=CONNECTION_PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            call: Any = exc
            if call.code() is grpc.StatusCode.UNAVAILABLE:
                return str(call.details() or "")
        except ValueError:  # the client was closed meanwhile
            pass
        return ""

    def _unary(self, method: Any, request: Any, resend: bool = True) -> Any:
        """The call's answer; with `resend`, sent again while answered UNAVAILABLE (see
        channel.RESENT_BY_THE_SDK_METHODS), up to 5 sends within timeout_s, then the last
        answer raised."""
        started = time.monotonic()
        timeout_s = self._settings.timeout_s
        deadline = None if timeout_s is None else started + timeout_s
        tries, answered = 0, None
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                return self._opened(
                    functools.partial(method, request, metadata=self._metadata, timeout=left)
                )
            except grpc.RpcError as exc:
                error = self._failure(exc)
            if self._closed:
                raise error from None
            wait = None
            if resend and error.code == StatusCode.UNAVAILABLE:
                answered = error
                wait = resend_wait(tries, deadline, time.monotonic())
            if wait is None:
                break
            time.sleep(wait)
            tries += 1
        if error.code == StatusCode.DEADLINE_EXCEEDED and answered is not None:
            error = answered  # the last send ran out of time: the answer before it says why
        tried_s = time.monotonic() - started
        connected = self._connected()
        cause = ""
        if not connected and error.code == StatusCode.DEADLINE_EXCEEDED:
            cause = self._connection_error()
        raise unary_failure(error, self._settings.target, tried_s, connected, cause)

    def _stream(self, method: Any, request: Any, limit: StreamLimit | None = None) -> Iterator[Any]:
        """The call's messages; with `limit` it has no gRPC deadline and is given up on this
        side (see StreamLimit), else stream_timeout_s is its deadline."""
        timeout_s = None if limit is not None else self._settings.stream_timeout_s
        call = self._opened(lambda: method(request, metadata=self._metadata, timeout=timeout_s))
        expiry = None if limit is None else _Expiry(call, limit)
        try:
            yield from call
        except grpc.RpcError as exc:
            if expiry is not None and expiry.fired and limit is not None:
                connected = self._connected()
                cause = "" if connected else self._connection_error()
                raise limit.expired(connected, cause) from None
            error = self._failure(exc)
            if limit is not None and not self._closed:
                limit.failed(error, self._connected())
            raise error from None
        finally:
            if expiry is not None:
                expiry.stop()
            call.cancel()  # a caller that stops reading early must not leave the call open

    def _events(self, method: Any, request: Any, limit: StreamLimit | None) -> Iterator[Event]:
        for message in self._stream(method, request, limit):
            event = convert.event(message)
            if event is not None:
                yield event

    def generate(self, params: GenerateParams, limit: StreamLimit | None = None) -> Iterator[Event]:
        """Generate: submit, then the job's events, given up when `limit` runs out."""
        return self._events(self._stub.Generate, convert.generate_request(params), limit)

    def watch(self, job_id: str, limit: StreamLimit | None = None) -> Iterator[Event]:
        """Watch: the job's current state, then its events to the end, given up when `limit`
        runs out."""
        request = gateway_pb2.WatchRequest(job_id=job_id)
        return self._events(self._stub.Watch, request, limit)

    def submit(self, params: GenerateParams) -> JobHandle:
        """Submit: the job id at once."""
        return convert.job_handle(self._unary(self._stub.Submit, convert.generate_request(params)))

    def cancel(self, job_id: str) -> JobInfo:
        """Cancel, answering the job's state after it."""
        reply = self._unary(self._stub.Cancel, gateway_pb2.CancelRequest(job_id=job_id))
        return convert.job_info(reply)

    def delete_job(self, job_id: str) -> DeletedJob:
        """DeleteJob."""
        request = gateway_pb2.DeleteJobRequest(job_id=job_id)
        # Not resent: after UNAVAILABLE the job may be deleted already (REFUSED_FIRST_METHODS).
        return convert.deleted_job(self._unary(self._stub.DeleteJob, request, resend=False))

    def get(self, job_id: str) -> JobInfo:
        """GetJob."""
        reply = self._unary(self._stub.GetJob, gateway_pb2.GetJobRequest(job_id=job_id))
        return convert.job_info(reply)

    def list_jobs(self, query: JobQuery) -> JobPage:
        """ListJobs: one page."""
        reply = self._unary(self._stub.ListJobs, convert.list_jobs_request(query))
        return convert.job_page(reply)

    def list_models(self) -> list[ModelInfo]:
        """ListModels."""
        reply = self._unary(self._stub.ListModels, gateway_pb2.ListModelsRequest())
        return [convert.model_info(m) for m in reply.models]

    def upload(self, source: UploadSource) -> UploadHandle:
        """Upload: the input in chunks, answered with its handle."""
        chunks = convert.upload_chunks(source)
        # Not resent: the chunks are read as they are sent.
        return convert.upload_handle(self._unary(self._stub.Upload, chunks, resend=False))

    def download(self, job_id: str, offset: int) -> Iterator[Chunk]:
        """Download from a byte offset."""
        request = gateway_pb2.DownloadRequest(job_id=job_id, offset=offset)
        limit = FirstMessageLimit(self._settings)
        try:
            for message in self._stream(self._stub.Download, request, limit):
                limit.received()
                yield convert.chunk(message)
        except GatewayError as error:
            raise limit.error_to_raise(error) from None
