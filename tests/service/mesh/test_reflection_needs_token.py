"""Reflection describes the whole internal API: on a token-protected scheduler and worker only
holders of the internal token may list or describe it. Health stays open to probes, and the
public gateway's reflection stays open (API keys gate its calls, not its schema)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from tests.conftest import ROOT
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import keyed

TOKEN = "s3cret-token"
GRPCURL = ROOT / ".venv" / "bin" / "grpcurl"


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code)
        self.code = code


async def listed(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> set[str]:
    """The services reflection at `address` lists; raises Refused with the server's status.

    The request is written by hand, not sent from an iterator: a server that refuses at once
    can end the call while the request is still on its way, and grpc's iterator sender then
    fails the call INTERNAL ("Internal error from Core") in place of the server's status.
    Even so, on a loaded machine the client's core can still report that INTERNAL for the
    same race (one CI run in many): the call is asked again, as a client would."""
    for _ in range(4):
        try:
            return await _listed_once(address, metadata)
        except Refused as refused:
            if refused.code != grpc.StatusCode.INTERNAL:
                raise
    return await _listed_once(address, metadata)


async def _listed_once(address: str, metadata: tuple[tuple[str, str], ...]) -> set[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        call = stub.ServerReflectionInfo(metadata=metadata, timeout=10)
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await call.write(request)
            await call.done_writing()
        replies: list[reflection_pb2.ServerReflectionResponse] = []
        with contextlib.suppress(grpc.aio.AioRpcError):
            replies = [reply async for reply in call]
        code = await call.code()
    if code != grpc.StatusCode.OK:
        raise Refused(code)
    return {s.name for s in replies[0].list_services_response.service}


async def health(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), metadata=metadata, timeout=10
        )
    return int(reply.status)


async def test_reflection_on_the_scheduler_and_worker_needs_the_internal_token(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], token=TOKEN, gateway=keyed())
    try:
        token = ((INTERNAL_TOKEN_KEY, TOKEN),)
        for port, service in (
            (mesh.scheduler.port, "mediamesh.v1.Scheduler"),
            (mesh.workers[0].port, "mediamesh.v1.Worker"),
        ):
            address = f"127.0.0.1:{port}"
            for metadata in ((), ((INTERNAL_TOKEN_KEY, "wrong"),)):
                with pytest.raises(Refused) as refused:
                    await listed(address, metadata)
                assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert service in await listed(address, token)
            # Probes send no credential and still get an answer.
            assert await health(address) == health_pb2.HealthCheckResponse.SERVING
            # A caller presenting a token is a mesh service: a wrong one must show there too.
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await health(address, ((INTERNAL_TOKEN_KEY, "wrong"),))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert await health(address, token) == health_pb2.HealthCheckResponse.SERVING

        # The gateway's API is public: its schema is listed without an API key.
        assert "mediamesh.v1.Gateway" in await listed(f"127.0.0.1:{mesh.gateway.port}")
    finally:
        await stop_mesh(mesh)


async def test_grpcurl_lists_the_scheduler_with_the_token_header_only(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [], token=TOKEN)
    try:
        address = f"127.0.0.1:{mesh.scheduler.port}"

        def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(GRPCURL), "-plaintext", *args, address, "list"],
                capture_output=True,
                text=True,
                timeout=60,
            )

        without = await asyncio.to_thread(grpcurl)
        assert without.returncode != 0 and "Unauthenticated" in without.stderr, without
        assert "mediamesh.v1.Scheduler" not in without.stdout
        with_token = await asyncio.to_thread(grpcurl, "-H", f"{INTERNAL_TOKEN_KEY}: {TOKEN}")
        assert with_token.returncode == 0, with_token.stderr
        assert "mediamesh.v1.Scheduler" in with_token.stdout.split()
    finally:
        await stop_mesh(mesh)
