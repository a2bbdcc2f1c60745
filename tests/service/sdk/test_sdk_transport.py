"""The SDK's channel against hand-written fake gateways: service-config retries, pushback,
resumed downloads and mTLS, each counted on the server side."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from mediamesh.common.errors import PUSHBACK_KEY
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.sdk import AsyncClient, Client, GatewayError, JobState
from tests.service.sdk.conftest import Certificates, start_fake_gateway

ARTIFACT = bytes(range(256)) * 40  # 10 KiB in 10 chunks


class FlakyGateway(gateway_pb2_grpc.GatewayServicer):
    """Fails each method's first call as told, then answers; records every call."""

    def __init__(self, first_failure: tuple[grpc.StatusCode, int] | None) -> None:
        # (status, pushback ms or -1 for none) of every method's first call.
        self.first_failure = first_failure
        self.calls: dict[str, list[float]] = {}
        self.download_offsets: list[int] = []

    async def _enter(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.calls.setdefault(method, []).append(time.monotonic())
        if self.first_failure is not None and len(self.calls[method]) == 1:
            status, pushback_ms = self.first_failure
            trailing = ((PUSHBACK_KEY, str(pushback_ms)),) if pushback_ms >= 0 else ()
            await context.abort(status, f"first {method} fails", trailing)

    async def GetJob(self, request, context):
        await self._enter("GetJob", context)
        return common_pb2.JobInfo(job_id=request.job_id, state=common_pb2.RUNNING, step=2)

    async def ListModels(self, request, context):
        await self._enter("ListModels", context)
        return gateway_pb2.ListModelsResponse(models=[common_pb2.ModelInfo(name="m", ready=True)])

    async def Cancel(self, request, context):
        await self._enter("Cancel", context)
        return common_pb2.JobInfo(job_id=request.job_id, state=common_pb2.CANCELLED)

    async def DeleteJob(self, request, context):
        await self._enter("DeleteJob", context)
        return common_pb2.DeletedJob(
            job_id=request.job_id, state=common_pb2.SUCCEEDED, result_bytes=10
        )

    async def Submit(self, request, context):
        await self._enter("Submit", context)
        return gateway_pb2.JobHandle(job_id="j-1", state=common_pb2.QUEUED)

    async def Download(self, request, context) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        # The first stream breaks off after three chunks; the SDK resumes from its offset.
        self.download_offsets.append(request.offset)
        digest = hashlib.sha256(ARTIFACT).hexdigest()
        for offset in range(request.offset, len(ARTIFACT), 1024):
            if len(self.download_offsets) == 1 and offset == 3 * 1024:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
            yield gateway_pb2.DownloadChunk(
                data=ARTIFACT[offset : offset + 1024],
                offset=offset,
                total_size=len(ARTIFACT),
                mime_type="application/octet-stream",
                sha256=digest,
            )


async def test_idempotent_calls_retry_unavailable_through_the_service_config():
    fake = FlakyGateway((grpc.StatusCode.UNAVAILABLE, -1))
    server = await start_fake_gateway(fake)
    try:
        async with AsyncClient(server.address) as client:
            info = await client.get("j-1")
            assert info.state is JobState.RUNNING and info.step == 2
            assert [m.name for m in await client.list_models()] == ["m"]
            assert (await client.cancel("j-1")).state is JobState.CANCELLED

        def blocking_submit() -> str:
            with Client(server.address) as client:
                return client.submit("m", "x").job_id

        # Submit carries an idempotency key, so it is retried on UNAVAILABLE too.
        assert await asyncio.to_thread(blocking_submit) == "j-1"
        assert {name: len(times) for name, times in fake.calls.items()} == {
            "GetJob": 2,
            "ListModels": 2,
            "Cancel": 2,
            "Submit": 2,
        }
    finally:
        await server.server.stop(0)


async def test_a_refusal_that_is_not_retryable_is_raised_after_one_call():
    fake = FlakyGateway((grpc.StatusCode.PERMISSION_DENIED, -1))
    server = await start_fake_gateway(fake)
    try:
        async with AsyncClient(server.address) as client:
            with pytest.raises(GatewayError) as caught:
                await client.get("j-1")
        assert caught.value.code == "PERMISSION_DENIED"
        assert caught.value.message == "first GetJob fails"
        assert len(fake.calls["GetJob"]) == 1
    finally:
        await server.server.stop(0)


async def test_the_service_config_retry_waits_the_servers_pushback():
    fake = FlakyGateway((grpc.StatusCode.RESOURCE_EXHAUSTED, 600))
    server = await start_fake_gateway(fake)
    try:

        def blocking_get() -> JobState:
            with Client(server.address) as client:
                return client.get("j-1").state

        assert await asyncio.to_thread(blocking_get) is JobState.RUNNING
        first, second = fake.calls["GetJob"]
        # The channel's own backoff starts at 0.2 s; the wait came from the trailer.
        assert second - first >= 0.55
    finally:
        await server.server.stop(0)


async def test_delete_job_is_retried_after_an_over_limit_answer_only():
    # Over the limit, the gateway refused it before the scheduler saw it: retried. After
    # UNAVAILABLE the job may be gone already, so the error is the caller's to judge.
    over_limit = FlakyGateway((grpc.StatusCode.RESOURCE_EXHAUSTED, 100))
    server = await start_fake_gateway(over_limit)
    try:
        async with AsyncClient(server.address) as client:
            deleted = await client.delete_job("j-1")
        assert (deleted.job_id, deleted.state, deleted.result_bytes) == (
            "j-1",
            JobState.SUCCEEDED,
            10,
        )
        assert len(over_limit.calls["DeleteJob"]) == 2
    finally:
        await server.server.stop(0)
    unavailable = FlakyGateway((grpc.StatusCode.UNAVAILABLE, -1))
    server = await start_fake_gateway(unavailable)
    try:

        def blocking_delete() -> None:
            with Client(server.address) as client:
                client.delete_job("j-1")

        with pytest.raises(GatewayError) as caught:
            await asyncio.to_thread(blocking_delete)
        assert caught.value.code == "UNAVAILABLE"
        assert len(unavailable.calls["DeleteJob"]) == 1
    finally:
        await server.server.stop(0)


async def test_a_download_that_breaks_off_resumes_from_its_offset():
    fake = FlakyGateway(None)
    server = await start_fake_gateway(fake)
    try:
        async with AsyncClient(server.address) as client:
            artifact = await client.download("j-1")
        assert artifact.data == ARTIFACT and fake.download_offsets == [0, 3 * 1024]

        def blocking_download() -> bytes:
            with Client(server.address) as client:
                return client.download("j-1").data

        fake.download_offsets.clear()
        assert await asyncio.to_thread(blocking_download) == ARTIFACT
        assert fake.download_offsets == [0, 3 * 1024]
    finally:
        await server.server.stop(0)


async def test_mtls_needs_the_client_certificate(certificates: Certificates):
    credentials = grpc.ssl_server_credentials(
        [(certificates.server_key.read_bytes(), certificates.server_cert.read_bytes())],
        root_certificates=certificates.ca.read_bytes(),
        require_client_auth=True,
    )
    fake = FlakyGateway(None)
    server = await start_fake_gateway(fake, credentials)
    try:
        async with AsyncClient(
            server.address,
            ca_file=certificates.ca,
            cert_file=certificates.client_cert,
            key_file=certificates.client_key,
        ) as client:
            assert [m.name for m in await client.list_models()] == ["m"]
        async with AsyncClient(server.address, ca_file=certificates.ca, timeout_s=5) as anonymous:
            with pytest.raises(GatewayError) as caught:
                await anonymous.list_models()
            assert caught.value.code == "UNAVAILABLE"
        assert len(fake.calls["ListModels"]) == 1
        with pytest.raises(ValueError, match="go together"):
            Client(server.address, cert_file=certificates.client_cert)
    finally:
        await server.server.stop(0)
