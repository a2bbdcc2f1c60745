"""The CLI's client of the public gateway: generate with progress, download large results."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
from mediamesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


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


def channel(address: str, max_message_bytes: int = 64 * 1024 * 1024) -> grpc.Channel:
    return grpc.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ],
    )
