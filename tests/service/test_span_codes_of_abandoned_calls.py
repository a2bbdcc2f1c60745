"""A call its client abandons has the code the client saw on its SERVER span, as it has in
mediamesh_rpc_requests_total: the gRPC instrumentation learns a code only from the handler,
so a cancelled call's span kept the 0 (OK) it started with.

OpenTelemetry's gRPC conventions leave a SERVER span's status UNSET for CANCELLED (the
client's choice) and make it ERROR for DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode as SpanStatus

from mediamesh.common.interceptors import ServiceInterceptor

SLOW = "/test.Slow/Wait"


async def _wait_forever(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await asyncio.sleep(3600)
    return b""


def _slow_service() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "test.Slow", {"Wait": grpc.unary_unary_rpc_method_handler(_wait_forever)}
    )


async def _spans(exporter: InMemorySpanExporter, count: int) -> dict[str, ReadableSpan]:
    for _ in range(200):
        spans = exporter.get_finished_spans()
        if len(spans) >= count:
            return {span.name: span for span in spans}
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} spans expected, got {exporter.get_finished_spans()}")


async def _serve(exporter: InMemorySpanExporter) -> AsyncIterator[grpc.aio.Channel]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = grpc.aio.server(
        interceptors=[aio_server_interceptor(tracer_provider=provider), ServiceInterceptor()]
    )
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_generic_rpc_handlers((_slow_service(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)
        provider.shutdown()


async def test_a_cancelled_call_span_reads_cancelled_and_not_an_error() -> None:
    exporter = InMemorySpanExporter()
    async for channel in _serve(exporter):
        call = channel.unary_unary(SLOW)(b"")
        # Long enough for the handler to be running when the client leaves.
        await asyncio.sleep(0.3)
        call.cancel()
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        await watch.read()
        watch.cancel()
        spans = await _spans(exporter, 2)
    for name in (SLOW, "/grpc.health.v1.Health/Watch"):
        span = spans[name]
        assert span.attributes is not None
        assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0], name
        assert span.status.status_code is SpanStatus.UNSET, name


async def test_a_timed_out_call_span_reads_deadline_exceeded_and_an_error() -> None:
    exporter = InMemorySpanExporter()
    async for channel in _serve(exporter):
        try:
            await channel.unary_unary(SLOW)(b"", timeout=0.3)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        spans = await _spans(exporter, 1)
    span = spans[SLOW]
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert span.status.status_code is SpanStatus.ERROR
