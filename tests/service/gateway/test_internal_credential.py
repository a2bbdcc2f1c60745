"""A gateway whose internal credential the scheduler refuses, or that cannot reach the
scheduler, says so in its own log and readiness, and tells callers neither the internal
header's name nor the scheduler's address."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, InternalAuthSettings, MeshConfig
from mediamesh.gateway.api import upstream
from mediamesh.gateway.main import GatewayService, start_gateway
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


@pytest.fixture(autouse=True)
def fresh_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    # Module-wide in the gateway: another test's lines must not hold back this one's.
    monkeypatch.setattr(upstream, "throttle", upstream.LogThrottle(upstream.LOG_EVERY_S))


def gateway_config(config: MeshConfig, token: str | None, scheduler_address: str) -> MeshConfig:
    gateway = GatewaySettings(
        port=0,
        metrics_port=None,
        http_port=0,
        scheduler_address=scheduler_address,
        scheduler_lost_after_s=0.3,
    )
    auth = InternalAuthSettings.model_validate({"token": token} if token else {})
    return config.model_copy(update={"gateway": gateway, "internal_auth": auth})


async def refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def gateway_health(gateway: GatewayService) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return int(reply.status)


async def until_not_ready(gateway: GatewayService) -> None:
    for _ in range(100):
        if not gateway.watch.serving:
            return
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def refused_gateway(
    tmp_path: Path, models_dir: Path
) -> AsyncIterator[tuple[InProcessMesh, GatewayService]]:
    """A mesh whose scheduler wants one token, and a second gateway that presents another."""
    mesh = await start_mesh(tmp_path, models_dir, [], token="right-token")
    scheduler = f"127.0.0.1:{mesh.scheduler.port}"
    wrong = await start_gateway(
        gateway_config(mesh.config, "wrong-token", scheduler), load_registry()
    )
    try:
        yield mesh, wrong
    finally:
        await wrong.stop(0)
        await stop_mesh(mesh)


async def test_a_refused_gateway_token_is_logged_unready_and_unavailable_to_callers(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with refused_gateway(tmp_path, models_dir) as (mesh, wrong):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{wrong.port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            # Through mesh_errors (the data plane) and relay_errors (Upload) alike.
            calls = [
                stub.ListModels(gateway_pb2.ListModelsRequest(), timeout=10),
                stub.Upload(iter([gateway_pb2.UploadChunk(data=b"x")]), timeout=10),
                stub.ListModels(gateway_pb2.ListModelsRequest(), timeout=10),
            ]
            for call in calls:
                error = await refused(call)
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                assert error.details() == upstream.REFUSED_MESSAGE
                assert INTERNAL_TOKEN_KEY not in (error.details() or "")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{wrong.http_port}") as client:
            response = await client.get("/v1/models", timeout=10)
            assert response.status_code == 503, response.text
            assert INTERNAL_TOKEN_KEY not in response.text

            # Readiness asks with the token, so the refused one takes the gateway out.
            await until_not_ready(wrong)
            assert (await client.get("/readyz")).status_code == 503
        assert await gateway_health(wrong) == health_pb2.HealthCheckResponse.NOT_SERVING
        # The gateway holding the right token is unaffected.
        assert mesh.gateway.watch.serving
        assert await gateway_health(mesh.gateway) == health_pb2.HealthCheckResponse.SERVING

        errors = [
            r.getMessage()
            for r in caplog.records
            if r.name == "mediamesh.gateway" and r.levelno == logging.ERROR
        ]
        # Four refused calls, one line: rate-limited, naming the settings to fix.
        assert len(errors) == 1, errors
        assert "internal_auth" in errors[0] and "internal_tls" in errors[0]
        assert "gateway.scheduler_address" in errors[0]
        # The scheduler's side names the refused token too.
        assert any(
            r.name == "mediamesh.common.interceptors" and "internal_auth" in r.getMessage()
            for r in caplog.records
        )


async def test_new_jobs_on_a_refused_gateway_are_told_misconfigured_not_retry(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Once the watch counts the scheduler lost, new jobs are refused without a call: they
    # were told "unreachable; retry", and with only new jobs arriving the ERROR naming the
    # settings to fix was never logged.
    caplog.set_level(logging.INFO)
    async with refused_gateway(tmp_path, models_dir) as (_, wrong):
        await until_not_ready(wrong)
        assert not wrong.watch.serving
        async with grpc.aio.insecure_channel(f"127.0.0.1:{wrong.port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            job = common_pb2.GenerateRequest(model="echo", prompt="x")
            for call in (stub.Submit(job, timeout=10), collected(stub.Generate(job, timeout=10))):
                error = await refused(call)
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                assert error.details() == upstream.REFUSED_MESSAGE
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{wrong.http_port}") as client:
            response = await client.post("/v1/jobs", json={"model": "echo", "prompt": "x"})
            assert response.status_code == 503, response.text
            assert response.json()["message"] == upstream.REFUSED_MESSAGE
        errors = [
            r.getMessage()
            for r in caplog.records
            if r.name == "mediamesh.gateway" and r.levelno == logging.ERROR
        ]
        assert len(errors) == 1 and "internal_auth" in errors[0], errors


async def collected(call: grpc.aio.UnaryStreamCall) -> list[object]:
    return [event async for event in call]


async def test_a_gateway_without_a_token_is_unready_before_a_scheduler_that_wants_one(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [], token="right-token")
    scheduler = f"127.0.0.1:{mesh.scheduler.port}"
    tokenless = await start_gateway(gateway_config(mesh.config, None, scheduler), load_registry())
    try:
        await until_not_ready(tokenless)
        assert await gateway_health(tokenless) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await tokenless.stop(0)
        await stop_mesh(mesh)


async def test_a_gateway_with_the_right_token_stays_ready(tmp_path: Path, models_dir: Path) -> None:
    mesh = await start_mesh(
        tmp_path, models_dir, [], token="right-token", gateway={"scheduler_lost_after_s": 0.3}
    )
    try:
        await asyncio.sleep(1.0)  # three times the allowance
        assert mesh.gateway.watch.serving
        assert await gateway_health(mesh.gateway) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await stop_mesh(mesh)


async def test_an_unreachable_scheduler_is_logged_with_its_address_but_not_told_callers(
    unused_tcp_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{unused_tcp_port}"
    gateway = await start_gateway(
        gateway_config(MeshConfig(workers=[]), None, address), load_registry()
    )
    caplog.set_level(logging.INFO)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            for call in (
                stub.ListModels(gateway_pb2.ListModelsRequest(), timeout=10),
                stub.Upload(iter([gateway_pb2.UploadChunk(data=b"x")]), timeout=10),
            ):
                error = await refused(call)
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                assert error.details() == upstream.UNREACHABLE_MESSAGE
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http_port}") as client:
            response = await client.post(
                "/v1/jobs", json={"model": "echo", "prompt": "x"}, timeout=10
            )
            assert response.status_code == 503 and response.json()["code"] == "UNAVAILABLE"
            assert str(unused_tcp_port) not in response.text
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.name == "mediamesh.gateway" and "is unreachable:" in r.getMessage()
        ]
        assert len(warnings) == 1 and str(unused_tcp_port) in warnings[0], warnings
    finally:
        await gateway.stop(0)


async def test_uploads_refused_for_the_gateway_token_never_read_as_internal(
    tmp_path: Path, models_dir: Path
) -> None:
    """The scheduler reads a refused upload stream before refusing it: an asyncio client
    still writing when a refusal arrives reports INTERNAL instead (grpc/grpc#36066), so some
    uploads through a gateway with a wrong token answered "internal error"."""
    mesh = await start_mesh(tmp_path, models_dir, [], token="right-token")
    scheduler = f"127.0.0.1:{mesh.scheduler.port}"
    wrong = await start_gateway(
        gateway_config(mesh.config, "wrong-token", scheduler), load_registry()
    )
    # Several chunks each: the gateway is still writing when the scheduler answers.
    chunks = [gateway_pb2.UploadChunk(data=b"x" * 65536) for _ in range(8)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{wrong.port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            errors = await asyncio.gather(
                *(refused(stub.Upload(iter(chunks), timeout=20)) for _ in range(40))
            )
    finally:
        await wrong.stop(0.5)
        await stop_mesh(mesh)
    codes = [(e.code(), e.details()) for e in errors]
    assert set(codes) == {(grpc.StatusCode.UNAVAILABLE, upstream.REFUSED_MESSAGE)}, codes
