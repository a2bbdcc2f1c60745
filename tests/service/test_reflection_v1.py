"""Every mesh server answers reflection under grpc.reflection.v1 as well as v1alpha.

grpcio-reflection serves only v1alpha; tools that ask the stable v1 first (grpcurl from 1.9,
grpcui, Postman) got UNIMPLEMENTED there.
"""

from __future__ import annotations

from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from mediamesh.common.api.health import REFLECTION_V1_SERVICE
from tests.service.conftest import start_mesh, stop_mesh


async def _services(channel: grpc.aio.Channel, service: str) -> list[str]:
    call = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    stream = call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    answer = await stream.read()
    stream.cancel()
    return sorted(s.name for s in answer.list_services_response.service)


async def test_the_gateway_answers_reflection_v1_like_v1alpha(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}") as channel:
            v1 = await _services(channel, REFLECTION_V1_SERVICE)
            v1alpha = await _services(channel, "grpc.reflection.v1alpha.ServerReflection")
    finally:
        await stop_mesh(mesh)
    assert v1 == v1alpha
    assert "mediamesh.v1.Gateway" in v1
    # Both names are listed: grpcurl calls only a service that reflection lists.
    assert {REFLECTION_V1_SERVICE, "grpc.reflection.v1alpha.ServerReflection"} <= set(v1)


async def _file_of(channel: grpc.aio.Channel, symbol: str) -> list[str] | str:
    """The files reflection answers a symbol with (the first named is its own), or the
    error's status name."""
    call = channel.stream_stream(
        f"/{REFLECTION_V1_SERVICE}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
    stream = call(iter([request]), timeout=10)
    answer = await stream.read()
    stream.cancel()
    if answer.HasField("error_response"):
        return grpc.StatusCode.NOT_FOUND.name if answer.error_response.error_code == 5 else "?"
    files = answer.file_descriptor_response.file_descriptor_proto
    return [descriptor_pb2.FileDescriptorProto.FromString(f).name for f in files]


async def test_reflection_finds_the_file_of_a_method(tmp_path: Path, models_dir: Path):
    """What `grpcurl describe mediamesh.v1.Gateway.Submit` asks for."""
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}") as channel:
            found = {
                symbol: await _file_of(channel, symbol)
                for symbol in (
                    "mediamesh.v1.Gateway",
                    "mediamesh.v1.Gateway.Submit",
                    "mediamesh.v1.GenerateRequest.prompt",
                    "mediamesh.v1.REALTIME",
                    "inference.GRPCInferenceService.RepositoryIndex",
                    "mediamesh.v1.Gateway.NoSuchMethod",
                    "mediamesh.v1.GenerateRequest.no_such_field",
                    REFLECTION_V1_SERVICE,
                )
            }
    finally:
        await stop_mesh(mesh)
    gateway_file = found["mediamesh.v1.Gateway"][0]
    assert gateway_file == "mediamesh/v1/gateway.proto"
    assert found["mediamesh.v1.Gateway.Submit"][0] == gateway_file
    assert found["mediamesh.v1.GenerateRequest.prompt"][0] == "mediamesh/v1/common.proto"
    assert found["mediamesh.v1.REALTIME"][0] == "mediamesh/v1/common.proto"
    assert found["inference.GRPCInferenceService.RepositoryIndex"][0] == (
        "inference/grpc_service.proto"
    )
    assert found[REFLECTION_V1_SERVICE][0] == "grpc/reflection/v1/reflection.proto"
    assert found["mediamesh.v1.Gateway.NoSuchMethod"] == "NOT_FOUND"
    assert found["mediamesh.v1.GenerateRequest.no_such_field"] == "NOT_FOUND"
