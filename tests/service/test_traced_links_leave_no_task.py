"""With tracing on, a stream-stream link whose server goes away leaves no task behind.

Any stream-stream client interceptor makes grpc.aio carry `call.write()`s through a request
generator of its own, which a call that dies with its peer left pending: a worker logged
"Task was destroyed but it is pending" after each scheduler restart. The mesh's traced
channels carry no such interceptor (its stream-stream calls are untraced links).
"""

from __future__ import annotations

import asyncio
import gc

import grpc
import pytest

from mediamesh.common import telemetry

METHOD = "/test.Links/Link"


def _echo_server() -> grpc.aio.Server:
    async def link(requests, context):  # type: ignore[no-untyped-def]
        async for request in requests:
            yield request

    handler = grpc.method_handlers_generic_handler(
        "test.Links", {"Link": grpc.stream_stream_rpc_method_handler(link)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    return server


def _pending_request_pumps() -> list[asyncio.Task[object]]:
    return [
        task for task in asyncio.all_tasks() if "_consume_request_iterator" in repr(task.get_coro())
    ]


async def test_a_link_that_dies_with_its_server_leaves_no_pending_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry, "_tracing_enabled", True)
    interceptors = telemetry.client_tracing_interceptors()
    assert interceptors, "tracing on gives the unary and stream-unary interceptors"
    assert not [i for i in interceptors if isinstance(i, grpc.aio.StreamStreamClientInterceptor)]
    server = _echo_server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=interceptors)
    call = channel.stream_stream(METHOD)()
    await call.write(b"ping")
    assert await call.read() == b"ping"
    await server.stop(0)  # the peer restarts
    # A plain call says the RPC failed; an intercepted one that it already finished.
    with pytest.raises((grpc.aio.AioRpcError, asyncio.InvalidStateError)):
        await call.write(b"again")
        await call.read()
    call.cancel()
    await channel.close()
    await asyncio.sleep(0.1)
    gc.collect()
    assert _pending_request_pumps() == []
