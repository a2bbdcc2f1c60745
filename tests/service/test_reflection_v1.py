"""Every mesh server answers reflection under grpc.reflection.v1 as well as v1alpha.

grpcio-reflection serves only v1alpha; tools that ask the stable v1 first (grpcurl from 1.9,
grpcui, Postman) got UNIMPLEMENTED there.
"""

from __future__ import annotations

from pathlib import Path

import grpc
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
