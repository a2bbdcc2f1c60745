"""Requests that do not even parse: INVALID_ARGUMENT naming the field, on both APIs."""

from __future__ import annotations

import grpc
import pytest

from tests.service.conftest import InProcessMesh


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (payloads here are under 128 bytes)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize(
    ("method", "raw", "words"),
    [
        ("/mediamesh.v1.Gateway/Submit", field(1, b"echo") + field(2, b"\xff\xfe"), "prompt"),
        ("/mediamesh.v1.Gateway/GetJob", field(1, b"\xc3"), "job_id"),
        ("/inference.GRPCInferenceService/ModelInfer", field(1, b"ech\xff"), "model_name"),
        (
            "/inference.GRPCInferenceService/ModelInfer",
            field(1, b"echo") + field(5, field(1, b"pr\xffompt")),
            "inputs.name",
        ),
        ("/inference.GRPCInferenceService/ModelMetadata", b"\xff\xff\xff", "not a valid"),
    ],
)
async def test_bytes_that_do_not_parse_are_invalid_argument(
    image_mesh: InProcessMesh, method, raw, words
):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{image_mesh.gateway.port}")
    image_mesh.channels.append(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(method)(raw, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()
    if "not a valid" not in words:
        assert "not valid UTF-8" in caught.value.details()
    assert not image_mesh.core.jobs


async def test_a_stream_with_a_bad_message_fails_with_invalid_argument(image_mesh):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{image_mesh.gateway.port}")
    image_mesh.channels.append(channel)
    call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call(iter([field(1, b"\xff")]), timeout=10):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "model_name: not valid UTF-8" in caught.value.details()
