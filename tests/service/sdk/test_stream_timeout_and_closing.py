"""What the SDK's clients do at the edges of a call, against a hand-written gateway:
`stream_timeout_s` stops waiting on this side (no gRPC deadline reaches the gateway, which
would make it the job's deadline) and names the job; an unreachable gateway fails a generate
within `timeout_s`, naming its address; closing a client ends the calls open on it, and any
later call, with the SDK's error rather than CancelledError or grpc's own."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator

import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc
from mediamesh.sdk import AsyncClient, Client, GatewayError, Queued
from tests.service.sdk.conftest import start_fake_gateway

JOB = "j-7"


class SlowGateway(gateway_pb2_grpc.GatewayServicer):
    """Accepts every Generate and Watch (one Queued event), then stays quiet; records the
    time left of each call's deadline, as the gateway would adopt it for the job."""

    def __init__(self) -> None:
        self.time_remaining: list[float | None] = []

    async def _queued(self, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        self.time_remaining.append(context.time_remaining())
        yield common_pb2.GenerateEvent(
            job_id=JOB, state=common_pb2.QUEUED, queued=common_pb2.Queued(position=3)
        )
        await asyncio.sleep(60)

    async def Generate(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        async for event in self._queued(context):
            yield event

    async def Watch(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        async for event in self._queued(context):
            yield event

    async def GetJob(self, request, context):
        return common_pb2.JobInfo(job_id=request.job_id, state=common_pb2.QUEUED)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
async def slow_gateway() -> AsyncIterator[tuple[SlowGateway, str]]:
    fake = SlowGateway()
    server = await start_fake_gateway(fake)
    yield fake, server.address
    await server.server.stop(0)


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_stream_timeout_s_ends_the_wait_not_the_job(slow_gateway, client_kind) -> None:
    fake, address = slow_gateway

    async def follow_async() -> tuple[list, GatewayError]:
        seen: list = []
        async with AsyncClient(address, stream_timeout_s=1.0) as client:
            with pytest.raises(GatewayError) as caught:
                async for event in client.generate("echo", "p"):
                    seen.append(event)
        return seen, caught.value

    def follow_blocking() -> tuple[list, GatewayError]:
        seen: list = []
        with Client(address, stream_timeout_s=1.0) as client, pytest.raises(GatewayError) as caught:
            for event in client.generate("echo", "p"):
                seen.append(event)
        return seen, caught.value

    started = time.monotonic()
    if client_kind == "async":
        seen, error = await follow_async()
    else:
        seen, error = await asyncio.to_thread(follow_blocking)
    assert 0.9 <= time.monotonic() - started < 5
    assert [type(e) for e in seen] == [Queued]
    # No deadline went with the call: the gateway would have made it the job's.
    assert fake.time_remaining == [None]
    assert error.code == "DEADLINE_EXCEEDED" and error.job_id == JOB and error.field is None
    assert error.message.startswith(f"stream_timeout_s (1 s) ran out before job '{JOB}' ended")
    assert "the job goes on" in error.message


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_watch_gives_up_at_stream_timeout_s_naming_the_job(slow_gateway, client_kind) -> None:
    fake, address = slow_gateway

    async def follow_async() -> GatewayError:
        async with AsyncClient(address, stream_timeout_s=0.5) as client:
            with pytest.raises(GatewayError) as caught:
                async for _ in client.watch(JOB):
                    pass
        return caught.value

    def follow_blocking() -> GatewayError:
        with Client(address, stream_timeout_s=0.5) as client, pytest.raises(GatewayError) as caught:
            for _ in client.watch(JOB):
                pass
        return caught.value

    if client_kind == "async":
        error = await follow_async()
    else:
        error = await asyncio.to_thread(follow_blocking)
    assert fake.time_remaining == [None]
    assert error.code == "DEADLINE_EXCEEDED" and error.job_id == JOB


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_an_unreachable_gateway_fails_generate_within_timeout_s(client_kind) -> None:
    address = f"127.0.0.1:{closed_port()}"

    async def follow_async() -> GatewayError:
        async with AsyncClient(address, timeout_s=2) as client:
            with pytest.raises(GatewayError) as caught:
                async for _ in client.generate("echo", "p"):
                    pass
        return caught.value

    def follow_blocking() -> GatewayError:
        with Client(address, timeout_s=2) as client, pytest.raises(GatewayError) as caught:
            list(client.generate("echo", "p"))
        return caught.value

    started = time.monotonic()
    if client_kind == "async":
        error = await follow_async()
    else:
        error = await asyncio.to_thread(follow_blocking)
    elapsed = time.monotonic() - started
    # It kept sending for timeout_s (reattach_s, 60 s, is for a job already accepted).
    assert 1.5 <= elapsed < 5, elapsed
    assert error.code == "UNAVAILABLE" and error.job_id == ""
    assert f"the gateway at {address}" in error.message and "timeout_s is 2" in error.message


async def test_closing_an_async_client_ends_its_open_generate_with_the_sdks_error(
    slow_gateway,
) -> None:
    _, address = slow_gateway
    client = AsyncClient(address)
    first = asyncio.Event()

    async def follow() -> None:
        async for _ in client.generate("echo", "p"):
            first.set()

    following = asyncio.create_task(follow())
    await asyncio.wait_for(first.wait(), 10)
    await client.close()
    with pytest.raises(GatewayError) as caught:
        await asyncio.wait_for(following, 10)
    assert caught.value.code == "CANCELLED" and caught.value.job_id == JOB
    assert "the client is closed" in caught.value.message


async def test_cancelling_the_task_still_cancels_it(slow_gateway) -> None:
    _, address = slow_gateway
    async with AsyncClient(address) as client:
        first = asyncio.Event()

        async def follow() -> None:
            async for _ in client.generate("echo", "p"):
                first.set()

        following = asyncio.create_task(follow())
        await asyncio.wait_for(first.wait(), 10)
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following


async def test_closing_a_blocking_client_ends_its_open_generate_with_the_same_error(
    slow_gateway,
) -> None:
    _, address = slow_gateway
    client = Client(address)
    first = threading.Event()
    outcome: list[BaseException] = []

    def follow() -> None:
        try:
            for _ in client.generate("echo", "p"):
                first.set()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=follow)
    thread.start()
    assert await asyncio.to_thread(first.wait, 10)
    client.close()
    await asyncio.to_thread(thread.join, 10)
    (error,) = outcome
    assert isinstance(error, GatewayError)
    assert error.code == "CANCELLED" and error.job_id == JOB
    assert "the client is closed" in error.message


async def test_a_closed_client_raises_the_sdks_error_for_every_call(slow_gateway) -> None:
    _, address = slow_gateway
    client = AsyncClient(address)
    await client.close()
    for call in (client.get(JOB), anext(client.watch(JOB)), client.list_models()):
        with pytest.raises(GatewayError, match="the client is closed") as caught:
            await call
        assert caught.value.code == "CANCELLED"
    await client.close()  # closing again is harmless

    def blocking() -> None:
        closed = Client(address)
        closed.close()
        for call in (lambda: closed.get(JOB), lambda: next(iter(closed.watch(JOB)))):
            with pytest.raises(GatewayError, match="the client is closed") as caught:
                call()
            assert caught.value.code == "CANCELLED"
        closed.close()

    await asyncio.to_thread(blocking)
