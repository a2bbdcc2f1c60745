"""A call its client abandons counts under the code the client saw, never as OK.

A cancelled or timed-out call ends its handler with CancelledError before any status is
set, and the interceptor counted it as OK: the error panels never showed a client
timeout or a client that went away.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY

from mediamesh.common.interceptors import ServiceInterceptor

SERVICE = "grpc.health.v1.Health"


def calls(method: str, code: str) -> float:
    value = REGISTRY.get_sample_value(
        "mediamesh_rpc_requests_total", {"service": SERVICE, "method": method, "code": code}
    )
    return value or 0.0


async def test_abandoned_calls_count_as_cancelled_or_deadline_exceeded() -> None:
    server = grpc.aio.server(interceptors=[ServiceInterceptor()])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    before = {code: calls("Watch", code) for code in ("OK", "CANCELLED", "DEADLINE_EXCEEDED")}
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            # Watch streams until its client leaves: one call times out, one is cancelled.
            timed_out = stub.Watch(health_pb2.HealthCheckRequest(), timeout=0.3)
            await timed_out.read()
            cancelled = stub.Watch(health_pb2.HealthCheckRequest())
            await cancelled.read()
            cancelled.cancel()
            try:
                await timed_out.read()
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            for _ in range(100):
                if (
                    calls("Watch", "DEADLINE_EXCEEDED") > before["DEADLINE_EXCEEDED"]
                    and calls("Watch", "CANCELLED") > before["CANCELLED"]
                ):
                    break
                await asyncio.sleep(0.05)
    finally:
        await server.stop(None)
    assert calls("Watch", "DEADLINE_EXCEEDED") == before["DEADLINE_EXCEEDED"] + 1
    assert calls("Watch", "CANCELLED") == before["CANCELLED"] + 1
    assert calls("Watch", "OK") == before["OK"]
