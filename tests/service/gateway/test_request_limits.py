"""Bounded requests through the real servers: string and bytes limits, fields a model does not
use, the KServe timeout, and the per-tenant read budget."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mediamesh.common.errors import RETRY_AFTER_KEY
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.gateway.core.tensors import join_bytes_tensor
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed


def kserve(mesh: InProcessMesh) -> pb_grpc.GRPCInferenceServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
    mesh.channels.append(channel)
    return pb_grpc.GRPCInferenceServiceStub(channel)


def scheduler(mesh: InProcessMesh) -> scheduler_pb2_grpc.SchedulerStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
    mesh.channels.append(channel)
    return scheduler_pb2_grpc.SchedulerStub(channel)


def infer_request(model: str, negative: bytes | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="prompt", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(join_bytes_tensor([b"a fox"]))
    if negative is not None:
        request.inputs.add(name="negative_prompt", datatype="BYTES", shape=[1])
        request.raw_input_contents.append(join_bytes_tensor([negative]))
    return request


async def failure(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def stream_failure(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    return caught.value


def invalid(error: grpc.aio.AioRpcError, *words: str) -> bool:
    details = error.details() or ""
    return error.code() == grpc.StatusCode.INVALID_ARGUMENT and all(w in details for w in words)


async def test_string_limits_hold_at_the_gateway_and_again_at_the_scheduler(keyed_mesh):
    gateway = keyed_mesh.gateway_stub()
    for key in ("k" * 257, "k" * (10 * 1024 * 1024)):
        request = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key=key)
        error = await failure(gateway.Submit(request, metadata=auth(KEY_A)))
        assert invalid(error, "idempotency_key:", "the limit is 256 bytes")
    # Past gateway.max_request_bytes (17 MiB) gRPC refuses the message without reading it.
    request = common_pb2.GenerateRequest(model="echo", idempotency_key="k" * (50 * 1024 * 1024))
    error = await failure(gateway.Submit(request, metadata=auth(KEY_A)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "17825792" in (error.details() or "")
    error = await failure(
        gateway.GetJob(gateway_pb2.GetJobRequest(job_id="j" * 129), metadata=auth(KEY_A))
    )
    assert invalid(error, "job_id:", "128 bytes")
    infer = infer_request("echo")
    infer.parameters["priority"].string_param = "x" * 300
    error = await failure(kserve(keyed_mesh).ModelInfer(infer, metadata=auth(KEY_A)))
    assert invalid(error, "parameters['priority'].string_param", "256 bytes")
    # A gateway's checks are not the scheduler's only defence.
    submit = scheduler_pb2.SubmitRequest(
        request=common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="k" * 257),
        tenant="a",
    )
    error = await failure(scheduler(keyed_mesh).Submit(submit, timeout=10))
    assert invalid(error, "request.idempotency_key:", "the limit is 256 bytes")
    assert not keyed_mesh.core.jobs
    at_limit = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="k" * 256)
    assert (await gateway.Submit(at_limit, metadata=auth(KEY_A))).job_id


async def test_a_field_the_model_does_not_use_is_refused_on_every_path(keyed_mesh):
    gateway = keyed_mesh.gateway_stub()
    flux = common_pb2.GenerateRequest(model="flux-tiny", prompt="a fox", negative_prompt="blur")
    error = await failure(gateway.Submit(flux, metadata=auth(KEY_A)))
    assert invalid(error, "negative_prompt: model 'flux-tiny'")
    error = await failure(
        kserve(keyed_mesh).ModelInfer(infer_request("flux-tiny", b"blur"), metadata=auth(KEY_A))
    )
    assert invalid(error, "negative_prompt: model 'flux-tiny'")
    submit = scheduler_pb2.SubmitRequest(request=flux, tenant="a")
    error = await failure(scheduler(keyed_mesh).Submit(submit, timeout=10))
    assert invalid(error, "negative_prompt: model 'flux-tiny'")
    assert not keyed_mesh.core.jobs
    # Echo uses neither a negative prompt nor guidance: it refuses both, like any model.
    for unused in ({"negative_prompt": "blur"}, {"guidance_scale": 2.0}):
        echo = common_pb2.GenerateRequest(model="echo", prompt="a fox", **unused)
        error = await failure(gateway.Submit(echo, metadata=auth(KEY_A)))
        assert invalid(error, f"{next(iter(unused))}: model 'echo'")
    assert not keyed_mesh.core.jobs
    listed = await gateway.ListModels(gateway_pb2.ListModelsRequest(), metadata=auth(KEY_A))
    accepted = {m.name: list(m.accepted_fields) for m in listed.models}
    assert "negative_prompt" not in accepted["flux-tiny"] and "width" in accepted["flux-tiny"]
    assert accepted["echo"] == ["prompt", "steps", "seed", "width", "height"]
    assert "negative_prompt" in accepted["sdxl-tiny"]


async def test_a_model_that_takes_the_field_runs_the_job(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [["sdxl-tiny"]], gateway=keyed())
    try:
        sdxl = common_pb2.GenerateRequest(model="sdxl-tiny", prompt="a fox", negative_prompt="blur")
        gateway = mesh.gateway_stub()
        events = [e async for e in gateway.Generate(sdxl, metadata=auth(KEY_A), timeout=60)]
        assert events[-1].HasField("result")
        (job,) = mesh.core.jobs.values()
        assert job.params.negative_prompt == "blur"
    finally:
        await stop_mesh(mesh)


async def test_a_kserve_timeout_too_large_for_a_job_is_invalid_argument(keyed_mesh):
    request = infer_request("echo")
    request.parameters["timeout"].int64_param = 2**63 - 1
    error = await failure(kserve(keyed_mesh).ModelInfer(request, metadata=auth(KEY_A)))
    assert invalid(error, "timeout:", str((2**32 - 1) * 1000))
    assert not keyed_mesh.core.jobs


@pytest.fixture
async def read_limited_mesh(tmp_path: Path, models_dir: Path):
    gateway = keyed(a={"reads_per_second": 0.01, "read_burst": 3})
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=gateway)
    yield mesh
    await stop_mesh(mesh)


async def test_reads_are_rate_limited_per_tenant(read_limited_mesh):
    mesh = read_limited_mesh
    gateway = mesh.gateway_stub()
    job = common_pb2.GenerateRequest(model="echo", prompt="x")
    handle = await gateway.Submit(job, metadata=auth(KEY_A))
    get = gateway_pb2.GetJobRequest(job_id=handle.job_id)
    for _ in range(3):
        await gateway.GetJob(get, metadata=auth(KEY_A))
    over = [
        await failure(gateway.GetJob(get, metadata=auth(KEY_A))),
        await stream_failure(
            gateway.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id), metadata=auth(KEY_A))
        ),
        await stream_failure(
            gateway.Download(
                gateway_pb2.DownloadRequest(job_id=handle.job_id), metadata=auth(KEY_A)
            )
        ),
        await failure(gateway.ListModels(gateway_pb2.ListModelsRequest(), metadata=auth(KEY_A))),
        await failure(
            gateway.DeleteJob(
                gateway_pb2.DeleteJobRequest(job_id=handle.job_id), metadata=auth(KEY_A)
            )
        ),
        await failure(
            kserve(mesh).ModelMetadata(pb.ModelMetadataRequest(name="echo"), metadata=auth(KEY_A))
        ),
    ]
    for error in over:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert "read rate: tenant 'a'" in (error.details() or "")
        assert int(dict(error.trailing_metadata() or ())[RETRY_AFTER_KEY]) > 0
    # Submits have their own budget, and another tenant its own reads.
    assert (await gateway.Submit(job, metadata=auth(KEY_A))).job_id
    error = await failure(gateway.GetJob(get, metadata=auth(KEY_B)))
    assert error.code() == grpc.StatusCode.NOT_FOUND
