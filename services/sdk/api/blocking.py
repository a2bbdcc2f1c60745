"""The gateway's calls over a grpc blocking channel, in SDK values; errors raise GatewayError."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from mediamesh.common.generated.v1 import gateway_pb2, gateway_pb2_grpc
from mediamesh.sdk.api import convert
from mediamesh.sdk.api.channel import blocking_channel, call_metadata
from mediamesh.sdk.events import Event
from mediamesh.sdk.options import ClientSettings, GenerateParams
from mediamesh.sdk.types import (
    Chunk,
    JobHandle,
    JobInfo,
    JobPage,
    JobQuery,
    ModelInfo,
    UploadHandle,
)
from mediamesh.sdk.uploads import UploadSource


class BlockingTransport:
    """One channel and stub; each method is one gateway call."""

    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        self._channel = blocking_channel(settings)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = call_metadata(settings)

    def close(self) -> None:
        """Close the channel, cancelling calls still open."""
        self._channel.close()

    def _unary(self, method: Any, request: Any) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self._settings.timeout_s)
        except grpc.RpcError as exc:
            raise convert.gateway_error(exc) from None

    def _stream(self, method: Any, request: Any, timeout_s: float | None = None) -> Iterator[Any]:
        timeout_s = self._settings.stream_timeout_s if timeout_s is None else timeout_s
        call = method(request, metadata=self._metadata, timeout=timeout_s)
        try:
            yield from call
        except grpc.RpcError as exc:
            raise convert.gateway_error(exc) from None
        finally:
            call.cancel()  # a caller that stops reading early must not leave the call open

    def _events(self, method: Any, request: Any, timeout_s: float | None = None) -> Iterator[Event]:
        for message in self._stream(method, request, timeout_s):
            event = convert.event(message)
            if event is not None:
                yield event

    def generate(self, params: GenerateParams) -> Iterator[Event]:
        """Generate: submit, then the job's events."""
        return self._events(self._stub.Generate, convert.generate_request(params))

    def watch(self, job_id: str, timeout_s: float | None = None) -> Iterator[Event]:
        """Watch: the job's current state, then its events to the end, within timeout_s
        (None: stream_timeout_s)."""
        request = gateway_pb2.WatchRequest(job_id=job_id)
        return self._events(self._stub.Watch, request, timeout_s)

    def submit(self, params: GenerateParams) -> JobHandle:
        """Submit: the job id at once."""
        return convert.job_handle(self._unary(self._stub.Submit, convert.generate_request(params)))

    def cancel(self, job_id: str) -> JobInfo:
        """Cancel, answering the job's state after it."""
        reply = self._unary(self._stub.Cancel, gateway_pb2.CancelRequest(job_id=job_id))
        return convert.job_info(reply)

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
        return convert.upload_handle(self._unary(self._stub.Upload, chunks))

    def download(self, job_id: str, offset: int) -> Iterator[Chunk]:
        """Download from a byte offset."""
        request = gateway_pb2.DownloadRequest(job_id=job_id, offset=offset)
        for message in self._stream(self._stub.Download, request):
            yield convert.chunk(message)
