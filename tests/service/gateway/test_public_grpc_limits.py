"""What an anonymous or greedy caller can make the public gRPC listener do: a call without a
valid API key is refused from its metadata, before its request is read or parsed; a request
is held to gateway.max_request_bytes and its repeated fields to their counts; and the
listener serves at most gateway.max_concurrent_rpcs calls at once, and one connection opens
at most gateway.max_streams_per_connection, the rest waiting their turn."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mediamesh.common.api import lenient
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.settings import GatewaySettings
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, auth, keyed

MIB = 1024 * 1024
# About 16 MiB of webhook events: within the receive limit, and slow to walk one by one.
MANY_EVENTS = 1_400_000


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many requests of each message type the gateway's servicers parsed (a spy on the
    deserializer `lenient` registers them with, installed before the mesh starts)."""
    counts: Counter[str] = Counter()
    original = lenient._parser

    def spied(message_class):
        parse = original(message_class)

        def parse_and_count(data: bytes):
            counts[message_class.DESCRIPTOR.name] += 1
            return parse(data)

        return parse_and_count

    monkeypatch.setattr(lenient, "_parser", spied)
    return counts


@pytest.fixture
async def mesh(
    tmp_path: Path, models_dir: Path, parsed: Counter[str]
) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(tmp_path, models_dir, [], gateway=keyed())
    yield mesh
    await stop_mesh(mesh)


def channel_to(mesh: InProcessMesh) -> grpc.aio.Channel:
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{mesh.gateway.port}", options=[("grpc.max_send_message_length", 100 * MIB)]
    )
    mesh.channels.append(channel)
    return channel


def many_events_request() -> bytes:
    request = common_pb2.GenerateRequest(model="echo", prompt="x")
    request.webhook.url = "https://hooks.example/x"
    request.webhook.events.extend(["completed"] * MANY_EVENTS)
    return request.SerializeToString()


async def code_of(call) -> grpc.StatusCode:
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_calls_without_a_valid_key_are_refused_before_their_request_is_parsed(
    mesh: InProcessMesh, parsed: Counter[str]
):
    channel = channel_to(mesh)
    # Raw bytes, sent as they are: the client does no work per call.
    submit = channel.unary_unary("/mediamesh.v1.Gateway/Submit")
    generate = channel.unary_stream("/mediamesh.v1.Gateway/Generate")
    upload = channel.stream_unary("/mediamesh.v1.Gateway/Upload")
    infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    big = common_pb2.GenerateRequest(model="echo", image=b"x" * (8 * MIB)).SerializeToString()
    events = many_events_request()
    wrong = auth("not-a-key")

    def chunks():
        return iter([gateway_pb2.UploadChunk(data=b"y" * MIB).SerializeToString()] * 4)

    calls = {
        "submit, no key": submit(big),
        "submit of many events, no key": submit(events),
        "submit, wrong key": submit(big, metadata=wrong),
        "generate, no key": generate(events),
        "upload, no key": upload(chunks()),
        "infer, wrong key": infer(pb.ModelInferRequest(model_name="echo").SerializeToString()),
    }
    codes = {name: await code_of(call) for name, call in calls.items()}
    assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes
    assert not parsed, f"parsed requests of callers without a key: {dict(parsed)}"
    # The probes' calls need no key; a keyed call is parsed and held to its counts.
    live = pb_grpc.GRPCInferenceServiceStub(channel)
    assert (await live.ServerLive(pb.ServerLiveRequest())).live
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await submit(events, metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == f"webhook.events: {MANY_EVENTS} entries; the limit is 8"
    assert parsed["GenerateRequest"] == 1


async def test_health_answers_at_once_while_anonymous_callers_send_large_requests(
    mesh: InProcessMesh,
):
    channel = channel_to(mesh)
    submit = channel.unary_unary("/mediamesh.v1.Gateway/Submit")
    health = health_pb2_grpc.HealthStub(channel)
    await health.Check(health_pb2.HealthCheckRequest())  # connected
    events = many_events_request()
    flood = [asyncio.ensure_future(code_of(submit(events))) for _ in range(16)]
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
    took = time.perf_counter() - started
    codes = await asyncio.gather(*flood)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert took < 0.5, f"health took {took:.2f} s behind 16 anonymous 16 MiB requests"
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}


async def test_requests_are_held_to_max_request_bytes(tmp_path: Path, models_dir: Path):
    # The default takes two inline input images of the largest size (8 MiB each), no more.
    assert GatewaySettings().max_request_bytes == 17 * MIB
    assert GatewaySettings(max_message_bytes=4 * MIB).max_request_bytes == 4 * MIB
    with pytest.raises(ValueError, match=r"gateway.max_request_bytes: .* at most 4194304"):
        GatewaySettings(max_message_bytes=4 * MIB, max_request_bytes=5 * MIB)
    mesh = await start_mesh(
        tmp_path, models_dir, [], gateway={**keyed(), "max_request_bytes": 2 * MIB}
    )
    try:
        submit = channel_to(mesh).unary_unary("/mediamesh.v1.Gateway/Submit")
        request = common_pb2.GenerateRequest(model="echo", image=b"x" * (3 * MIB))
        code = await code_of(submit(request.SerializeToString(), metadata=auth(KEY_A)))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Within it, the request reaches the checks (an image that is no image).
        request = common_pb2.GenerateRequest(model="echo", image=b"x" * MIB)
        code = await code_of(submit(request.SerializeToString(), metadata=auth(KEY_A)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await stop_mesh(mesh)


async def test_calls_beyond_max_concurrent_rpcs_are_refused_and_probes_still_answer(
    tmp_path: Path, models_dir: Path
):
    gateway = {**keyed(), "max_concurrent_rpcs": 2}
    mesh = await start_mesh(tmp_path, models_dir, [], gateway=gateway)
    try:
        channel = channel_to(mesh)
        upload = channel.stream_unary("/mediamesh.v1.Gateway/Upload")
        submit = channel.unary_unary("/mediamesh.v1.Gateway/Submit")
        never_ends = asyncio.Event()

        async def chunks():
            yield gateway_pb2.UploadChunk(data=b"y").SerializeToString()
            await never_ends.wait()

        holding = [upload(chunks(), metadata=auth(KEY_A)) for _ in range(2)]
        await asyncio.sleep(0.5)
        request = common_pb2.GenerateRequest(model="echo", prompt="x").SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await submit(request, metadata=auth(KEY_A), timeout=5)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert caught.value.details().startswith("max_concurrent_rpcs: 2 calls in progress")
        # Probes are not counted, nor refused: health and KServe's liveness answer.
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        live = pb_grpc.GRPCInferenceServiceStub(channel)
        assert (await live.ServerLive(pb.ServerLiveRequest(), timeout=5)).live
        # Ended calls free their places.
        for call in holding:
            call.cancel()
        await asyncio.sleep(0.2)
        code = await code_of(submit(request, metadata=auth(KEY_A), timeout=5))
        assert code != grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await stop_mesh(mesh)


async def test_calls_beyond_max_streams_per_connection_wait_for_a_stream_and_are_not_refused(
    tmp_path: Path, models_dir: Path
):
    # gRPC's default "overload protection" counts a connection's streams until the server
    # has freed them, not until they end; a client that opened a stream as soon as another
    # ended then had it refused (RST_STREAM REFUSED_STREAM, UNAVAILABLE to the caller).
    unlimited = {"max_concurrent_jobs": 10_000, "max_queued_jobs": 10_000}
    gateway = {
        **keyed(a={**unlimited, "requests_per_second": 1e6, "burst": 1_000_000}),
        "max_streams_per_connection": 4,
    }
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=gateway)
    try:
        generate = channel_to(mesh).unary_stream("/mediamesh.v1.Gateway/Generate")
        request = common_pb2.GenerateRequest(model="echo", prompt="x").SerializeToString()
        calls = [generate(request, metadata=auth(KEY_A), timeout=60) for _ in range(300)]
        # Each read at once: a stream whose messages nobody reads stays open.
        codes = Counter(code.name for code in await asyncio.gather(*map(code_of, calls)))
        assert codes == {"OK": 300}, codes
    finally:
        await stop_mesh(mesh)
