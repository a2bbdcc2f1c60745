"""Triton's statistics extension on the gateway: counts the scheduler kept of real jobs, seen
by their own tenant, by another tenant and by an admin key, over gRPC and over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.tenancy import hash_key
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, NO_SPOT_WAIT, auth, keyed
from tests.service.gateway.test_kserve import prompt_request, stub_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_KEY = "key-of-the-operators"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> AsyncIterator[InProcessMesh]:
    """flux-tiny and echo on one worker; tenants a and b, an admin key of tenant ops, and
    the HTTP face. Tenant a runs three flux-tiny jobs and has one cancelled, b runs echo."""
    gateway = {**keyed(), "http_port": 0}
    gateway["api_keys"].append(
        {"sha256": hash_key(ADMIN_KEY), "tenant": "ops", "scopes": ["admin"]}
    )
    mesh = await start_mesh(
        tmp_path_factory.mktemp("statistics"),
        models_dir,
        [["flux-tiny", "echo"]],
        gateway=gateway,
        scheduler=NO_SPOT_WAIT,
    )
    yield mesh
    await stop_mesh(mesh)


async def _statistics(mesh: InProcessMesh, key: str, name: str = "", version: str = ""):
    request = pb.ModelStatisticsRequest(name=name, version=version)
    return await stub_for(mesh).ModelStatistics(request, metadata=auth(key))


async def _until(
    mesh: InProcessMesh, key: str, name: str, ready: Callable[[pb.ModelStatistics], bool]
) -> pb.ModelStatistics:
    """`name`'s statistics once `ready` holds: a job counts as it ends, before its caller
    hears of it, but a batch as its stream closes, moments after its last result."""
    for _ in range(250):
        (model,) = (await _statistics(mesh, key, name)).model_stats
        if ready(model):
            return model
        await asyncio.sleep(0.02)
    raise AssertionError(f"never counted: {model}")


def _batches_of(jobs: int) -> Callable[[pb.ModelStatistics], bool]:
    return lambda model: model.inference_stats.compute_infer.count >= jobs


async def _cancelled_job(mesh: InProcessMesh, key: str) -> None:
    """A long flux-tiny job of `key`'s tenant, cancelled as soon as it is accepted."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
    mesh.channels.append(channel)
    gateway = gateway_pb2_grpc.GatewayStub(channel)
    request = common_pb2.GenerateRequest(model="flux-tiny", prompt="long", steps=50)
    handle = await gateway.Submit(request, metadata=auth(key))
    await gateway.Cancel(gateway_pb2.CancelRequest(job_id=handle.job_id), metadata=auth(key))
    for _ in range(500):
        job = await gateway.GetJob(
            gateway_pb2.GetJobRequest(job_id=handle.job_id), metadata=auth(key)
        )
        if job.state == common_pb2.CANCELLED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the job was never cancelled")


async def test_a_tenant_reads_its_own_counts_and_an_admin_the_meshs(mesh: InProcessMesh):
    started_ms = int(time.time() * 1000)
    request = prompt_request("flux-tiny", b"a", b"b", b"c", steps=2, width=32, height=32)
    await stub_for(mesh).ModelInfer(request, metadata=auth(KEY_A))
    # The batch is counted as its stream closes, which may be just after the reply.
    own = await _until(mesh, KEY_A, "flux-tiny", _batches_of(3))
    ended_ms = time.time() * 1000

    assert (own.name, own.version) == ("flux-tiny", "1")
    assert started_ms <= own.last_inference <= ended_ms
    assert own.inference_count == 3 and 1 <= own.execution_count <= 3
    stats = own.inference_stats
    assert stats.success.count == 3 and stats.fail.count == 0
    assert stats.queue.count == stats.compute_input.count == stats.compute_infer.count == 3
    assert stats.compute_output.count == 3
    assert stats.compute_infer.ns > 0 and stats.compute_output.ns > 0
    # Each job's time from acceptance to its end holds all of its phases.
    phases = ("queue", "compute_input", "compute_infer", "compute_output")
    assert stats.success.ns >= sum(getattr(stats, p).ns for p in phases)
    assert stats.cache_hit.count == stats.cache_miss.count == 0
    # The batch sizes add up to the jobs, and each size counts its batches once.
    assert sum(b.batch_size * b.compute_infer.count for b in own.batch_stats) == 3
    assert sum(b.compute_infer.count for b in own.batch_stats) == own.execution_count
    assert not own.memory_usage and not own.response_stats

    # Another tenant ran nothing of it.
    (other,) = (await _statistics(mesh, KEY_B, "flux-tiny")).model_stats
    assert other == pb.ModelStatistics(
        name="flux-tiny",
        version="1",
        inference_stats=pb.InferStatistics(
            **{
                field: pb.StatisticDuration()
                for field in pb.InferStatistics.DESCRIPTOR.fields_by_name
            }
        ),
    )
    await stub_for(mesh).ModelInfer(prompt_request("echo", b"x"), metadata=auth(KEY_B))
    await _cancelled_job(mesh, KEY_A)

    await _until(mesh, ADMIN_KEY, "flux-tiny", lambda m: m.inference_stats.fail.count == 1)
    every = await _statistics(mesh, ADMIN_KEY)
    by_name = {model.name: model for model in every.model_stats}
    assert list(by_name) == list(load_registry().names)
    assert by_name["flux-tiny"].inference_count == 3
    assert by_name["flux-tiny"].inference_stats.fail.count == 1
    assert by_name["echo"].inference_count == 1
    assert by_name["wan-tiny"].execution_count == 0
    (echo_of_a,) = (await _statistics(mesh, KEY_A, "echo")).model_stats
    assert echo_of_a.inference_count == 0


async def test_unknown_models_versions_and_callers_are_refused(mesh: InProcessMesh):
    for name, version, code, start in (
        ("nope", "", grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope'"),
        ("echo", "2", grpc.StatusCode.NOT_FOUND, ""),
        ("", "1", grpc.StatusCode.INVALID_ARGUMENT, "version: '1' names a version of no model"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _statistics(mesh, KEY_A, name, version)
        assert caught.value.code() is code, caught.value.details()
        assert caught.value.details().startswith(start)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub_for(mesh).ModelStatistics(pb.ModelStatisticsRequest())
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_the_same_counts_over_http_as_the_extension_writes_them(mesh: InProcessMesh):
    base = f"http://127.0.0.1:{mesh.gateway.http_port}"
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        await stub_for(mesh).ModelInfer(prompt_request("echo", b"y"), metadata=auth(KEY_A))
        await _until(mesh, KEY_A, "echo", _batches_of(1))
        every = (await client.get("/v2/models/stats")).json()
        one = (await client.get("/v2/models/echo/stats")).json()
        versioned = (await client.get("/v2/models/echo/versions/1/stats")).json()
        unknown = await client.get("/v2/models/nope/stats")
        wrong_version = await client.get("/v2/models/echo/versions/2/stats")
        no_key = await httpx.AsyncClient(base_url=base).get("/v2/models/stats")
    (expected,) = (await _statistics(mesh, KEY_A, "echo")).model_stats
    assert one == versioned
    (model,) = one["model_stats"]
    assert set(model) == {
        "name",
        "version",
        "last_inference",
        "inference_count",
        "execution_count",
        "inference_stats",
        "response_stats",
        "batch_stats",
        "memory_usage",
    }
    assert (model["name"], model["version"]) == ("echo", "1")
    # Numbers as numbers, not protobuf JSON's strings.
    assert model["inference_count"] == expected.inference_count >= 1
    assert model["inference_stats"]["success"] == {
        "count": expected.inference_stats.success.count,
        "ns": expected.inference_stats.success.ns,
    }
    assert set(model["inference_stats"]) == set(pb.InferStatistics.DESCRIPTOR.fields_by_name)
    assert [b["batch_size"] for b in model["batch_stats"]] == [
        b.batch_size for b in expected.batch_stats
    ]
    assert [m["name"] for m in every["model_stats"]] == list(load_registry().names)
    assert unknown.status_code == 404
    assert unknown.json()["error"].startswith("Request for unknown model: 'nope'")
    assert wrong_version.status_code == 404
    assert no_key.status_code == 401
