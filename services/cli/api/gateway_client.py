"""The CLI's client of the public gateway: generate with progress, download large results.

The blocking functions serve `mediamesh generate`; AsyncGateway serves `mediamesh batch`,
which follows many jobs at once. Both fetch results above the inline limit with Download.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

RETRY_AFTER_KEY = "retry-after-ms"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A Download that breaks off resumes from the bytes already received, this many times.
DOWNLOAD_ATTEMPTS = 3


@dataclass
class Outcome:
    job_id: str
    state: str
    data: bytes = b""
    mime_type: str = ""
    seed: int = 0
    error_code: str = ""
    error_message: str = ""


def metadata(api_key: str | None) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {api_key}")] if api_key else []


def generate_request(**fields: object) -> common_pb2.GenerateRequest:
    """A request from CLI values; None leaves a field unset (the model's default)."""
    priority = fields.pop("priority", None)
    request = common_pb2.GenerateRequest(
        **{k: v for k, v in fields.items() if v is not None and v != ""}
    )
    if priority:
        request.priority = common_pb2.Priority.Value(str(priority).upper())
    return request


def download(
    stub: gateway_pb2_grpc.GatewayStub, job_id: str, api_key: str | None
) -> tuple[bytes, str]:
    parts: list[bytes] = []
    expected_sha = ""
    mime = ""
    for chunk in stub.Download(
        gateway_pb2.DownloadRequest(job_id=job_id), metadata=metadata(api_key)
    ):
        parts.append(chunk.data)
        expected_sha, mime = chunk.sha256, chunk.mime_type
    data = b"".join(parts)
    if expected_sha and hashlib.sha256(data).hexdigest() != expected_sha:
        raise RuntimeError(f"download of job {job_id} is corrupt (sha256 mismatch)")
    return data, mime


def follow(
    stub: gateway_pb2_grpc.GatewayStub,
    events: Iterator[common_pb2.GenerateEvent],
    api_key: str | None,
    on_event: Callable[[common_pb2.GenerateEvent], None] = lambda e: None,
) -> Outcome:
    job_id = ""
    for event in events:
        job_id = event.job_id or job_id
        on_event(event)
        kind = event.WhichOneof("event")
        if kind == "result":
            result = event.result
            data, mime = result.data, result.mime_type
            if not data and result.HasField("artifact"):
                data, mime = download(stub, job_id, api_key)
            return Outcome(job_id, "SUCCEEDED", data, mime, result.seed)
        if kind == "error":
            state = common_pb2.JobState.Name(event.state)
            return Outcome(
                job_id, state, error_code=event.error.code, error_message=event.error.message
            )
    return Outcome(job_id, "UNKNOWN", error_message="the event stream ended without a result")


def _options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def channel(address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.Channel:
    return grpc.insecure_channel(address, options=_options(max_message_bytes))


class GatewayError(Exception):
    """A call the gateway refused or could not finish, without gRPC types."""

    def __init__(self, code: str, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.retry_after_s = code, message, retry_after_s


def _gateway_error(exc: grpc.aio.AioRpcError) -> GatewayError:
    trailing = dict(exc.trailing_metadata() or ())
    retry_ms = trailing.get(RETRY_AFTER_KEY, "0")
    return GatewayError(exc.code().name, exc.details() or "", int(retry_ms) / 1000)


class AsyncGateway:
    """Submit, follow and download over one grpc.aio channel; errors raise GatewayError."""

    def __init__(
        self,
        address: str,
        api_key: str | None = None,
        root_cert: bytes | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        options = _options(max_message_bytes)
        if root_cert is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates=root_cert)
            self._channel = grpc.aio.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(address, options=options)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._metadata = tuple(metadata(api_key))

    async def __aenter__(self) -> AsyncGateway:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._channel.close()

    async def submit(self, fields: dict[str, Any], idempotency_key: str = "") -> str:
        """The job id; the same key from the same tenant returns the same job."""
        request = generate_request(**fields, idempotency_key=idempotency_key)
        try:
            handle = await self._stub.Submit(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise _gateway_error(exc) from None
        return handle.job_id

    async def follow(self, job_id: str) -> Outcome:
        """Watch a job to its end (replayed at once if it already ended)."""
        try:
            async for event in self._stub.Watch(
                gateway_pb2.WatchRequest(job_id=job_id), metadata=self._metadata
            ):
                kind = event.WhichOneof("event")
                if kind == "result":
                    result = event.result
                    data, mime = result.data, result.mime_type
                    if not data and result.HasField("artifact"):
                        data, mime = await self.download(job_id)
                    return Outcome(job_id, "SUCCEEDED", data, mime, result.seed)
                if kind == "error":
                    state = common_pb2.JobState.Name(event.state)
                    return Outcome(
                        job_id,
                        state,
                        error_code=event.error.code,
                        error_message=event.error.message,
                    )
        except grpc.aio.AioRpcError as exc:
            raise _gateway_error(exc) from None
        raise GatewayError("UNAVAILABLE", f"the event stream of job {job_id} ended early")

    async def download(self, job_id: str) -> tuple[bytes, str]:
        """The artifact in chunks, resumed from its offset if the stream breaks off."""
        received = bytearray()
        expected, mime = "", ""
        for attempt in range(DOWNLOAD_ATTEMPTS):
            request = gateway_pb2.DownloadRequest(job_id=job_id, offset=len(received))
            try:
                async for chunk in self._stub.Download(request, metadata=self._metadata):
                    received += chunk.data
                    expected, mime = chunk.sha256, chunk.mime_type
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt == DOWNLOAD_ATTEMPTS - 1:
                    raise _gateway_error(exc) from None
        data = bytes(received)
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise GatewayError("DATA_LOSS", f"download of job {job_id} is corrupt (sha256)")
        return data, mime
