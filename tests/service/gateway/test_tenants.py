"""API keys, tenant isolation and quotas, on mediamesh.v1.Gateway and the KServe API alike."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from mediamesh.common.errors import RETRY_AFTER_KEY
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.gateway.core.tensors import join_bytes_tensor
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed


def kserve(mesh) -> pb_grpc.GRPCInferenceServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
    mesh.channels.append(channel)
    return pb_grpc.GRPCInferenceServiceStub(channel)


def infer_request(model: str, count: int = 1, priority: int = 0) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="prompt", datatype="BYTES", shape=[count])
    request.raw_input_contents.append(join_bytes_tensor([b"x"] * count))
    if priority:
        request.parameters["priority"].uint64_param = priority
    return request


def retry_after_ms(error: grpc.aio.AioRpcError) -> int:
    trailing = dict(error.trailing_metadata() or ())
    return int(trailing[RETRY_AFTER_KEY])


async def rejected(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_both_apis_need_a_valid_key_but_liveness_is_open(keyed_mesh):
    native, triton = keyed_mesh.gateway_stub(), kserve(keyed_mesh)
    for metadata in ((), auth("wrong-key"), (("authorization", "Basic " + KEY_A),)):
        calls = [
            native.ListModels(gateway_pb2.ListModelsRequest(), metadata=metadata),
            native.Submit(common_pb2.GenerateRequest(model="echo", prompt="x"), metadata=metadata),
            triton.ModelMetadata(pb.ModelMetadataRequest(name="echo"), metadata=metadata),
            triton.ModelInfer(infer_request("echo"), metadata=metadata),
        ]
        for call in calls:
            assert (await rejected(call)).code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await triton.ServerLive(pb.ServerLiveRequest())).live
    assert not keyed_mesh.core.jobs


async def test_a_tenant_never_sees_another_tenants_jobs(keyed_mesh):
    stub = keyed_mesh.gateway_stub()
    handle = await stub.Submit(
        common_pb2.GenerateRequest(model="echo", prompt="mine"), metadata=auth(KEY_A)
    )
    events = [
        e
        async for e in stub.Watch(
            gateway_pb2.WatchRequest(job_id=handle.job_id), metadata=auth(KEY_A)
        )
    ]
    assert events[-1].state == common_pb2.SUCCEEDED

    def calls(job_id: str, key: str) -> list:
        metadata = auth(key)
        return [
            stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), metadata=metadata),
            stub.Cancel(gateway_pb2.CancelRequest(job_id=job_id), metadata=metadata),
            stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=job_id), metadata=metadata),
            _drain(stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), metadata=metadata)),
            _drain(stub.Download(gateway_pb2.DownloadRequest(job_id=job_id), metadata=metadata)),
        ]

    unknown_id = "f" * len(handle.job_id)
    foreign = [await rejected(c) for c in calls(handle.job_id, KEY_B)]
    unknown = [await rejected(c) for c in calls(unknown_id, KEY_B)]
    for theirs, missing in zip(foreign, unknown, strict=True):
        assert theirs.code() == missing.code() == grpc.StatusCode.NOT_FOUND
        assert theirs.details().replace(handle.job_id, unknown_id) == missing.details()
    # The owner still sees it, untouched by the other tenant's Cancel and DeleteJob.
    info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=handle.job_id), metadata=auth(KEY_A))
    assert info.state == common_pb2.SUCCEEDED and info.tenant == "a"


async def _drain(stream) -> list:
    return [item async for item in stream]


@pytest.fixture
async def quota_mesh(tmp_path: Path, models_dir: Path):
    """No worker, so accepted jobs stay queued; tenant a is capped, tenant b rate-limited."""
    gateway = keyed(
        a={
            "max_queued_jobs": 2,
            "max_concurrent_jobs": 1,
            "highest_priority": "STANDARD",
            "allowed_models": ["echo"],
        },
        b={"requests_per_second": 0.5, "burst": 2},
    )
    mesh = await start_mesh(tmp_path, models_dir, [], gateway=gateway)
    yield mesh
    await stop_mesh(mesh)


async def test_queued_job_limit_answers_resource_exhausted_with_retry_after(quota_mesh):
    stub = quota_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="echo", prompt="x")
    for _ in range(2):
        await stub.Submit(request, metadata=auth(KEY_A))
    for error in (
        await rejected(stub.Submit(request, metadata=auth(KEY_A))),
        await rejected(
            kserve(quota_mesh).ModelInfer(infer_request("echo"), metadata=auth(KEY_A), timeout=10)
        ),
    ):
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the limit is 2" in error.details() and retry_after_ms(error) > 0
    # The scheduler enforces the tenant's queued and concurrent limits it was handed.
    assert {(j.quota.max_queued, j.quota.max_running) for j in quota_mesh.core.jobs.values()} == {
        (2, 1)
    }
    assert len(quota_mesh.core.jobs) == 2


async def test_request_rate_answers_resource_exhausted_with_retry_after(quota_mesh):
    stub = quota_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="echo", prompt="x")
    await stub.Submit(request, metadata=auth(KEY_B))
    # Two prompts are two jobs, and tenant b's bucket (burst 2) has one token left.
    infer = kserve(quota_mesh).ModelInfer(
        infer_request("echo", 2), metadata=auth(KEY_B), timeout=10
    )
    error = await rejected(infer)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "rate" in error.details()
    assert 0 < retry_after_ms(error) <= 2000
    await stub.Submit(request, metadata=auth(KEY_B))
    error = await rejected(stub.Submit(request, metadata=auth(KEY_B)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert 1000 <= retry_after_ms(error) <= 2000
    assert len(quota_mesh.core.jobs) == 2


async def test_priority_ceiling_and_model_list_are_refused_on_both_apis(quota_mesh):
    stub, triton = quota_mesh.gateway_stub(), kserve(quota_mesh)
    realtime = common_pb2.GenerateRequest(model="echo", prompt="x", priority=common_pb2.REALTIME)
    flux = common_pb2.GenerateRequest(model="flux-tiny", prompt="x")
    cases = [
        (stub.Submit(realtime, metadata=auth(KEY_A)), "REALTIME is above"),
        (
            triton.ModelInfer(infer_request("echo", priority=1), metadata=auth(KEY_A), timeout=10),
            "REALTIME is above",
        ),
        (stub.Submit(flux, metadata=auth(KEY_A)), "may not use 'flux-tiny'"),
        (
            triton.ModelInfer(infer_request("flux-tiny"), metadata=auth(KEY_A), timeout=10),
            "may not use",
        ),
    ]
    for call, words in cases:
        error = await rejected(call)
        # A permission, not a limit: waiting would not help, so there is no retry hint.
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED and words in error.details()
        assert RETRY_AFTER_KEY not in dict(error.trailing_metadata() or ())
    assert not quota_mesh.core.jobs
