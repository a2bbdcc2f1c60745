"""LoRA adapters through the in-process mesh: validation on every face, the adapter applied,
the loaded set visible in ListModels and GetStatus, and affinity routing between workers."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as kserve
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as kserve_grpc
from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.service.conftest import start_mesh, stop_mesh


def request(*adapters: common_pb2.AdapterRef, seed: int = 5) -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(
        model="flux-tiny", prompt="a fox", steps=2, seed=seed, adapters=list(adapters)
    )


async def result_of(stub, message: common_pb2.GenerateRequest) -> common_pb2.GenerateEvent:
    events = [event async for event in stub.Generate(message)]
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    return events[-1]


async def test_unknown_adapter_is_not_found_naming_it(image_mesh) -> None:
    stub = image_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(request(common_pb2.AdapterRef(name="watercolor")))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "'watercolor'" in caught.value.details()
    assert "style, style2" in caught.value.details()
    assert not image_mesh.core.jobs


@pytest.mark.parametrize(
    ("adapters", "words"),
    [
        ([common_pb2.AdapterRef(name="style", scale=4.5)], "adapters[0].scale: 4.5"),
        (
            [common_pb2.AdapterRef(name="style"), common_pb2.AdapterRef(name="style")],
            "named twice",
        ),
        ([common_pb2.AdapterRef(name="style")] * 5, "at most 4 per request"),
    ],
)
async def test_bad_adapter_lists_are_invalid_argument(image_mesh, adapters, words) -> None:
    stub = image_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(request(*adapters))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()


async def test_kserve_adapters_parameter(image_mesh) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{image_mesh.gateway.port}")
    image_mesh.channels.append(channel)
    stub = kserve_grpc.GRPCInferenceServiceStub(channel)

    def infer(adapters: str) -> kserve.ModelInferRequest:
        prompt = kserve.ModelInferRequest.InferInputTensor(
            name="prompt",
            datatype="BYTES",
            shape=[1],
            contents=kserve.InferTensorContents(bytes_contents=[b"a fox"]),
        )
        message = kserve.ModelInferRequest(model_name="flux-tiny", inputs=[prompt])
        message.parameters["adapters"].string_param = adapters
        message.parameters["steps"].int64_param = 2
        message.parameters["seed"].int64_param = 5
        return message

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(infer("style:0.5,oil:1"), timeout=30)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "'oil'" in caught.value.details()
    answer = await stub.ModelInfer(infer("style:1.0"), timeout=60)
    gateway = image_mesh.gateway_stub()
    native = await result_of(gateway, request(common_pb2.AdapterRef(name="style", scale=1.0)))
    assert answer.raw_output_contents[0][4:] == native.result.data


async def test_adapter_applies_and_shows_in_models_and_status(image_mesh) -> None:
    stub = image_mesh.gateway_stub()
    models = await stub.ListModels(gateway_pb2.ListModelsRequest())
    flux = next(m for m in models.models if m.name == "flux-tiny")
    assert [(a.name, round(a.default_scale, 3)) for a in flux.adapters] == [
        ("style", 1.0),
        ("style2", 0.8),
    ]
    plain = await result_of(stub, request())
    styled = await result_of(stub, request(common_pb2.AdapterRef(name="style2")))
    assert styled.result.data != plain.result.data
    # The default scale (0.8) was applied: the same as naming it.
    explicit = await result_of(stub, request(common_pb2.AdapterRef(name="style2", scale=0.8)))
    assert explicit.result.data == styled.result.data
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{image_mesh.scheduler.port}")
    image_mesh.channels.append(channel)
    scheduler = scheduler_pb2_grpc.SchedulerStub(channel)
    for _ in range(50):
        status = await scheduler.GetStatus(scheduler_pb2.GetStatusRequest())
        loaded = {(m.model, a.name) for w in status.workers for m in w.adapters for a in m.adapters}
        if ("flux-tiny", "style2") in loaded:
            break
        await asyncio.sleep(0.1)
    assert loaded == {("flux-tiny", "style2")}


async def test_affinity_keeps_an_adapter_on_the_worker_that_loaded_it(tmp_path, models_dir) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"], ["flux-tiny"]])
    try:
        stub = mesh.gateway_stub()
        workers = []
        for seed in (1, 2, 3):
            handle = await stub.Submit(request(common_pb2.AdapterRef(name="style"), seed=seed))
            async for _ in stub.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id)):
                pass
            info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=handle.job_id))
            assert info.state == common_pb2.SUCCEEDED
            workers.append(info.worker_id)
        # Without affinity the idle worker that has had fewer batches (the other one) would
        # take each next job; with it, the worker holding the adapter keeps them all.
        assert len(set(workers)) == 1, workers
        assert mesh.core.units[workers[0]].adapters == {"flux-tiny": frozenset({"style"})}
    finally:
        await stop_mesh(mesh)
