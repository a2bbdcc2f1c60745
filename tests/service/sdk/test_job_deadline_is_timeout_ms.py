"""A job's deadline is its `timeout_ms`: the SDK's `stream_timeout_s` only bounds the wait
(the job goes on), a refusal for lack of time names `timeout_ms`, and a raw gRPC caller
whose call deadline became the job's is told that instead."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.sdk import AsyncClient, GatewayError, GenerateOptions, JobState
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, auth
from tests.service.sdk.conftest import address_of

# Some 26 s of work by the cost model's first estimate: far more than any limit below.
LONG: GenerateOptions = {"steps": 50, "width": 512, "height": 512, "seed": 1}


async def test_stream_timeout_s_leaves_the_job_without_a_deadline(sdk_mesh: InProcessMesh):
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A, stream_timeout_s=1.0) as client:
        with pytest.raises(GatewayError) as caught:
            # No worker of this mesh serves flux-small: the job stays queued.
            async for _ in client.generate("flux-small", "a fox", seed=1):
                pass
        job_id = caught.value.job_id
        assert caught.value.code == "DEADLINE_EXCEEDED" and job_id
        assert sdk_mesh.core.jobs[job_id].deadline is None  # no deadline reached the mesh
        await asyncio.sleep(0.5)
        job = await client.get(job_id)
        assert not job.state.terminal, job  # it goes on, neither EXPIRED nor refused
        assert (await client.cancel(job_id)).state is JobState.CANCELLED


async def test_a_timeout_ms_too_short_for_the_job_is_refused_naming_it(sdk_mesh: InProcessMesh):
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A) as client:
        with pytest.raises(GatewayError) as submitted:
            await client.submit("flux-tiny", "a fox", timeout_ms=1000, **LONG)
        with pytest.raises(GatewayError) as generated:
            async for _ in client.generate("flux-tiny", "a fox", timeout_ms=1000, **LONG):
                pass
    for error in (submitted.value, generated.value):
        assert error.code == "DEADLINE_EXCEEDED" and error.field == "timeout_ms"
        assert re.match(
            r"timeout_ms: (0\.9\d\d|1\.000) s left, and this job needs at least ", error.message
        )


async def test_a_raw_call_deadline_that_became_the_jobs_is_named(sdk_mesh: InProcessMesh):
    stub = sdk_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="flux-tiny", prompt="a fox", **LONG)  # type: ignore[arg-type]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.Generate(request, metadata=auth(KEY_A), timeout=8):
            pass
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    details = caught.value.details() or ""
    assert details.startswith(
        "the call's gRPC deadline (the job's, being sooner than any timeout_ms): "
    ), details
    assert "s left, and this job needs at least " in details
    # With a sooner timeout_ms, that is what set the job's deadline, and what is named.
    request.timeout_ms = 1000
    with pytest.raises(grpc.aio.AioRpcError) as sooner:
        async for _ in stub.Generate(request, metadata=auth(KEY_A), timeout=8):
            pass
    assert re.match(r"timeout_ms: (0\.9\d\d|1\.000) s left", sooner.value.details() or "")
