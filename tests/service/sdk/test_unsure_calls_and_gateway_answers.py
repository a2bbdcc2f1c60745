"""Against hand-written gateways: a submit whose deadline ran out carries the key that gets
its job; a generate or watch the gateway answers with an error raises that error, not "no
answer"; and a TLS failure keeps its cause in every call's message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.sdk import AsyncClient, Client, GatewayError
from tests.service.sdk.conftest import Certificates, start_fake_gateway

SCHEDULER_DOWN = "the scheduler is unreachable; retry"


class SlowSubmits(gateway_pb2_grpc.GatewayServicer):
    """Takes 0.5 s to answer a Submit; answers a repeated key with the job it made."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    async def Submit(self, request, context) -> gateway_pb2.JobHandle:
        job_id = self.jobs.setdefault(request.idempotency_key, f"j-{len(self.jobs)}")
        await asyncio.sleep(0.5)
        return gateway_pb2.JobHandle(job_id=job_id, state=common_pb2.QUEUED)


class SchedulerDown(gateway_pb2_grpc.GatewayServicer):
    """Answers every Generate and Watch at once with UNAVAILABLE, as a gateway without its
    scheduler does."""

    async def Generate(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SCHEDULER_DOWN)
        yield common_pb2.GenerateEvent()  # never reached: makes this a stream handler

    async def Watch(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SCHEDULER_DOWN)
        yield common_pb2.GenerateEvent()

    async def Submit(self, request, context) -> gateway_pb2.JobHandle:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SCHEDULER_DOWN)

    async def GetJob(self, request, context) -> gateway_pb2.JobInfo:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SCHEDULER_DOWN)

    async def ListModels(self, request, context) -> gateway_pb2.ListModelsResponse:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SCHEDULER_DOWN)


async def test_a_timed_out_submit_carries_the_key_that_gets_its_job() -> None:
    fake = SlowSubmits()
    server = await start_fake_gateway(fake)

    def submit_twice() -> tuple[GatewayError, str]:
        with Client(server.address, timeout_s=0.2) as client, pytest.raises(GatewayError) as e:
            client.submit("echo", "p")
        with Client(server.address, timeout_s=5) as client:
            again = client.submit("echo", "p", idempotency_key=e.value.idempotency_key)
        return e.value, again.job_id

    try:
        error, job_id = await asyncio.to_thread(submit_twice)
        async with AsyncClient(server.address, timeout_s=0.2) as client:
            with pytest.raises(GatewayError) as caught:
                await client.submit("echo", "p", idempotency_key="mine-1")
    finally:
        await server.server.stop(0)
    assert error.code == "DEADLINE_EXCEEDED" and error.idempotency_key.startswith("sdk-")
    assert f"submit again with idempotency_key={error.idempotency_key!r}" in error.message
    assert list(fake.jobs) == [error.idempotency_key, "mine-1"] and job_id == "j-0"
    assert caught.value.idempotency_key == "mine-1"


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_a_gateway_error_is_raised_as_sent_not_as_no_answer(client_kind: str) -> None:
    server = await start_fake_gateway(SchedulerDown())

    async def follow_async() -> list[GatewayError]:
        errors = []
        async with AsyncClient(server.address, timeout_s=1) as client:
            for events in (client.generate("echo", "p"), client.watch("j-1")):
                with pytest.raises(GatewayError) as caught:
                    async for _ in events:
                        pass
                errors.append(caught.value)
        return errors

    def follow_blocking() -> list[GatewayError]:
        errors = []
        with Client(server.address, timeout_s=1) as client:
            for events in (client.generate("echo", "p"), client.watch("j-1")):
                with pytest.raises(GatewayError) as caught:
                    list(events)
                errors.append(caught.value)
        return errors

    try:
        if client_kind == "async":
            generate, watch = await follow_async()
        else:
            generate, watch = await asyncio.to_thread(follow_blocking)
    finally:
        await server.server.stop(0)
    for error in (generate, watch):
        assert error.code == "UNAVAILABLE", error
        assert error.message.startswith(SCHEDULER_DOWN), error.message
    assert generate.idempotency_key.startswith("sdk-") and watch.job_id == "j-1"


@pytest.mark.parametrize("client_kind", ["async", "blocking"])
async def test_a_unary_call_answered_unavailable_raises_that_answer_at_timeout_s(
    client_kind: str,
) -> None:
    # 3 s: the channel's own backoff (0.2, 0.4, 0.8, 1.6 s) was still waiting then, and
    # gRPC raised a bare "Deadline Exceeded" in place of the gateway's words.
    server = await start_fake_gateway(SchedulerDown())

    async def calls_async() -> list[BaseException | object]:
        async with AsyncClient(server.address, timeout_s=3) as client:
            return await asyncio.gather(
                client.list_models(),
                client.get("abc"),
                client.submit("echo", "p"),
                return_exceptions=True,
            )

    def calls_blocking() -> list[BaseException | object]:
        with Client(server.address, timeout_s=3) as client:
            calls = (
                client.list_models,
                lambda: client.get("abc"),
                lambda: client.submit("echo", "p"),
            )
            with ThreadPoolExecutor(len(calls)) as pool:
                futures = [pool.submit(call) for call in calls]
            return [future.exception() for future in futures]

    try:
        if client_kind == "async":
            errors = await calls_async()
        else:
            errors = await asyncio.to_thread(calls_blocking)
    finally:
        await server.server.stop(0)
    for error in errors:
        assert isinstance(error, GatewayError), error
        assert error.code == "UNAVAILABLE", error
        assert error.message.startswith(SCHEDULER_DOWN), error.message


async def test_a_tls_failure_keeps_its_cause(certificates: Certificates) -> None:
    key_pair = (certificates.server_key.read_bytes(), certificates.server_cert.read_bytes())
    server = await start_fake_gateway(
        gateway_pb2_grpc.GatewayServicer(), grpc.ssl_server_credentials([key_pair])
    )

    def calls() -> list[GatewayError]:
        errors = []
        # The system's roots do not trust the test CA: every handshake fails.
        with Client(server.address, tls=True, timeout_s=1) as client:
            for call in (lambda: list(client.generate("echo", "p")), client.list_models):
                with pytest.raises(GatewayError) as caught:
                    call()
                errors.append(caught.value)
        return errors

    try:
        errors = await asyncio.to_thread(calls)
    finally:
        await server.server.stop(0)
    for error in errors:
        assert error.message.startswith(f"cannot reach the gateway at {server.address} ")
        assert "CERTIFICATE_VERIFY_FAILED" in error.message, error.message
