"""A job's stream that breaks off with the gateway re-attaches with Watch: the gateway is
restarted on its port mid-job, or the connection is cut as a killed gateway's is; the job
runs on in the scheduler, and its Result comes once."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import Counter

import pytest

from mediamesh.common.registry import load_registry
from mediamesh.gateway.main import start_gateway
from mediamesh.sdk import (
    AsyncClient,
    Client,
    Error,
    Event,
    GatewayError,
    GenerateOptions,
    JobState,
    Notice,
    Progress,
    Queued,
    Result,
)
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.sdk.conftest import address_of

# Enough steps that the job is still running when its stream is broken after the first.
JOB: GenerateOptions = {"steps": 30, "seed": 3, "width": 128, "height": 128}


async def restart_gateway(mesh: InProcessMesh) -> None:
    """Stop the gateway (its calls end UNAVAILABLE) and start a new one on the same port."""
    port = mesh.gateway.port
    await mesh.gateway.stop(0)
    settings = mesh.config.gateway.model_copy(update={"port": port})
    config = mesh.config.model_copy(update={"gateway": settings})
    mesh.gateway = await start_gateway(config, load_registry())


class CuttableProxy:
    """A TCP proxy in front of the gateway whose connections can be dropped at once, as a
    gateway killed with SIGKILL drops them, and which refuses connections until reopened."""

    def __init__(self, upstream: str) -> None:
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Stop listening and reset every connection."""
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        self._writers += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


def check_once(events: list[Event]) -> Result:
    """One job, no event twice, and its Result last and once."""
    assert len({e.job_id for e in events}) == 1
    finals = [e for e in events if isinstance(e, Result | Error)]
    assert finals == [events[-1]] and isinstance(events[-1], Result), events[-1]
    result = events[-1]
    assert result.state is JobState.SUCCEEDED
    assert hashlib.sha256(result.data).hexdigest() == result.sha256
    steps = [(e.attempt, e.step) for e in events if isinstance(e, Progress)]
    assert steps == sorted(set(steps)), f"progress repeated or out of order: {steps}"
    notices = Counter((e.attempt, e.kind) for e in events if isinstance(e, Notice))
    assert all(count == 1 for count in notices.values()), notices
    assert sum(isinstance(e, Queued) for e in events) <= 1
    return result


def jobs_of_tenant_a(mesh: InProcessMesh) -> int:
    return sum(job.tenant == "a" for job in mesh.core.jobs.values())


@pytest.mark.parametrize("call", ["generate", "watch"])
async def test_async_streams_reattach_after_a_gateway_restart(
    sdk_mesh: InProcessMesh, call: str
) -> None:
    events: list[Event] = []
    restarted = False
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A) as client:
        if call == "generate":
            stream = client.generate("flux-tiny", "a fox", **JOB)
        else:
            stream = client.watch((await client.submit("flux-tiny", "a fox", **JOB)).job_id)
        async for event in stream:
            events.append(event)
            if isinstance(event, Progress) and not restarted:
                await restart_gateway(sdk_mesh)
                restarted = True
    assert restarted
    result = check_once(events)
    assert result.job_id == events[0].job_id
    assert jobs_of_tenant_a(sdk_mesh) == 1, "re-attaching must not submit the job again"


async def test_blocking_generate_reattaches_after_the_connection_is_cut(
    sdk_mesh: InProcessMesh,
) -> None:
    proxy = CuttableProxy(address_of(sdk_mesh))
    await proxy.open()
    loop = asyncio.get_running_loop()
    first_step = asyncio.Event()
    cut_done = threading.Event()

    def blocking() -> list[Event]:
        events: list[Event] = []
        with Client(proxy.address, api_key=KEY_A) as client:
            for event in client.generate("flux-tiny", "a fox", **JOB):
                events.append(event)
                if isinstance(event, Progress) and not cut_done.is_set():
                    loop.call_soon_threadsafe(first_step.set)
                    assert cut_done.wait(30)
        return events

    reading = asyncio.create_task(asyncio.to_thread(blocking))
    await asyncio.wait_for(first_step.wait(), 60)
    await proxy.cut()
    cut_done.set()
    await asyncio.sleep(1.0)  # down for a while: the first re-attach finds nobody
    await proxy.open()
    try:
        events = await asyncio.wait_for(reading, 120)
    finally:
        await proxy.cut()
    check_once(events)
    assert proxy.connections >= 2, "the stream was not re-attached over a new connection"
    assert jobs_of_tenant_a(sdk_mesh) == 1


async def test_giving_up_raises_an_error_that_names_the_job(sdk_mesh: InProcessMesh) -> None:
    proxy = CuttableProxy(address_of(sdk_mesh))
    await proxy.open()
    events: list[Event] = []
    started: float | None = None
    async with AsyncClient(proxy.address, api_key=KEY_A, reattach_s=1.5) as client:
        with pytest.raises(GatewayError) as caught:
            async for event in client.generate("flux-tiny", "a fox", **JOB):
                events.append(event)
                if isinstance(event, Progress) and started is None:
                    await proxy.cut()
                    started = time.monotonic()
        assert started is not None and time.monotonic() - started < 30
    job_id = events[0].job_id
    assert caught.value.code == "UNAVAILABLE" and caught.value.job_id == job_id
    assert job_id in str(caught.value)
    # The job went on without its stream: watching it again gets its one Result.
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A) as client:
        rest = [e async for e in client.watch(job_id)]
    assert isinstance(rest[-1], Result) and rest[-1].job_id == job_id


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_generate_keeps_trying_a_gateway_that_is_down_when_it_is_called(
    sdk_mesh: InProcessMesh, client_kind: str
) -> None:
    # Down longer than the channel's own five attempts last (under 3.2 s of backoff): the
    # request, with its idempotency key, is sent again until the gateway is back.
    proxy = CuttableProxy(address_of(sdk_mesh))
    await proxy.open()
    await proxy.cut()
    before = jobs_of_tenant_a(sdk_mesh)
    quick: GenerateOptions = {"steps": 2, "seed": 5}

    async def follow_async() -> list[Event]:
        async with AsyncClient(proxy.address, api_key=KEY_A) as client:
            return [e async for e in client.generate("flux-tiny", "a fox", **quick)]

    def follow_blocking() -> list[Event]:
        with Client(proxy.address, api_key=KEY_A) as client:
            return list(client.generate("flux-tiny", "a fox", **quick))

    following = asyncio.create_task(
        follow_async() if client_kind == "async" else asyncio.to_thread(follow_blocking)
    )
    await asyncio.sleep(4.5)
    assert not following.done(), "gave up while the gateway was down"
    await proxy.open()
    try:
        events = await asyncio.wait_for(following, 60)
    finally:
        await proxy.cut()
    check_once(events)
    assert jobs_of_tenant_a(sdk_mesh) == before + 1
