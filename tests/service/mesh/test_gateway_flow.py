"""Gateway -> scheduler -> worker in one process, over real gRPC on port 0."""

from __future__ import annotations

import asyncio
import io

import grpc
import pytest
from PIL import Image

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from tests.service.conftest import start_mesh, stop_mesh


async def collect(stream) -> list[common_pb2.GenerateEvent]:
    return [event async for event in stream]


async def test_generate_streams_queued_progress_per_step_and_a_png(image_mesh):
    stub = image_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(
        model="flux-tiny", prompt="a red fox", steps=5, width=64, height=48, seed=3
    )
    events = await collect(stub.Generate(request))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "queued"
    progress = [e.progress for e in events if e.HasField("progress")]
    assert [p.step for p in progress] == [1, 2, 3, 4, 5]
    assert all(p.total_steps == 5 for p in progress)
    result = events[-1].result
    assert events[-1].state == common_pb2.SUCCEEDED
    assert result.mime_type == "image/png" and result.seed == 3
    assert Image.open(io.BytesIO(result.data)).size == (64, 48)


async def test_submit_then_watch_from_another_gateway_replays_and_follows(image_mesh, models_dir):
    from mediamesh.common.registry import load_registry
    from mediamesh.gateway.main import start_gateway

    second = await start_gateway(image_mesh.config, load_registry())
    try:
        stub = image_mesh.gateway_stub()
        handle = await stub.Submit(
            common_pb2.GenerateRequest(model="flux-tiny", prompt="fox", steps=3, seed=1)
        )
        other = image_mesh.gateway_stub(f"127.0.0.1:{second.port}")
        events = await collect(other.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id)))
        assert events[-1].HasField("result")
        assert {e.progress.attempt for e in events if e.HasField("progress")} == {1}
        again = await collect(other.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id)))
        assert len(again) == 1 and again[0].result.data == events[-1].result.data
        info = await other.GetJob(gateway_pb2.GetJobRequest(job_id=handle.job_id))
        assert info.state == common_pb2.SUCCEEDED and info.attempts == 1
    finally:
        await second.stop(0.2)


async def test_a_watch_attached_mid_run_opens_with_the_progress_of_that_run(image_mesh):
    stub = image_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(
        model="flux-tiny", prompt="slow fox", steps=50, width=512, height=512, seed=4
    )
    handle = await stub.Submit(request)
    try:
        first = stub.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id))
        async for event in first:
            if event.HasField("progress"):
                break
        first.cancel()
        late = stub.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id))
        snapshot = await late.read()
        late.cancel()
        assert snapshot.HasField("progress"), snapshot
        assert snapshot.progress.step >= 1 and snapshot.progress.attempt == 1
    finally:
        await stub.Cancel(gateway_pb2.CancelRequest(job_id=handle.job_id))


async def test_idempotency_key_returns_the_same_job(image_mesh):
    stub = image_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="line-1", seed=5)
    first = await stub.Submit(request)
    second = await stub.Submit(request)
    assert first.job_id == second.job_id and second.deduplicated


async def test_a_retry_without_a_seed_follows_the_job_its_key_names(image_mesh):
    stub = image_mesh.gateway_stub()
    request = common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="no-seed")
    first = await stub.Submit(request)
    second = await stub.Submit(request)  # the mesh picks a seed each time
    assert first.job_id == second.job_id and second.deduplicated


@pytest.mark.parametrize("together", [False, True], ids=["after", "while-writing"])
async def test_a_key_reused_for_another_prompt_is_refused(image_mesh, together):
    stub = image_mesh.gateway_stub()
    key = f"reused-{together}"
    first = common_pb2.GenerateRequest(model="echo", prompt="a fox", idempotency_key=key)
    other = common_pb2.GenerateRequest(model="echo", prompt="a hen", idempotency_key=key)
    if together:
        # The second arrives while the first's row is being written.
        outcomes = await asyncio.gather(
            stub.Submit(first), stub.Submit(other), return_exceptions=True
        )
    else:
        outcomes = [await stub.Submit(first)]
        outcomes += await asyncio.gather(stub.Submit(other), return_exceptions=True)
    (handle,) = [o for o in outcomes if isinstance(o, gateway_pb2.JobHandle)]
    (refused,) = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details().startswith(f"idempotency_key: {key!r} already names job ")
    assert "whose prompt differs" in refused.details() and handle.job_id in refused.details()


async def test_list_models_reports_readiness_and_limits(image_mesh):
    stub = image_mesh.gateway_stub()
    reply = await stub.ListModels(gateway_pb2.ListModelsRequest())
    models = {m.name: m for m in reply.models}
    assert models["flux-tiny"].ready and models["flux-tiny"].modality == "image"
    assert models["flux-tiny"].parallelism == "data"
    assert models["flux-tiny"].limits.max_steps == 50
    # The prompt limit is listed, so a client need not learn it from a refusal.
    assert models["flux-tiny"].limits.max_prompt_chars == 2000
    assert not models["wan-tiny"].ready


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ({"model": "nope", "prompt": "x"}, grpc.StatusCode.NOT_FOUND, "model"),
        ({"model": "flux-tiny", "prompt": ""}, grpc.StatusCode.INVALID_ARGUMENT, "prompt"),
        (
            {"model": "flux-tiny", "prompt": "x", "steps": 51},
            grpc.StatusCode.INVALID_ARGUMENT,
            "1..50",
        ),
        (
            {"model": "flux-tiny", "prompt": "x", "width": 70},
            grpc.StatusCode.INVALID_ARGUMENT,
            "multiple of 16",
        ),
        (
            {"model": "flux-tiny", "prompt": "x", "width": 1024},
            grpc.StatusCode.INVALID_ARGUMENT,
            "width",
        ),
        (
            {"model": "flux-tiny", "prompt": "x", "guidance_scale": 99},
            grpc.StatusCode.INVALID_ARGUMENT,
            "guidance_scale",
        ),
        (
            {"model": "flux-tiny", "prompt": "x" * 2001},
            grpc.StatusCode.INVALID_ARGUMENT,
            "limit is 2000",
        ),
        (
            {"model": "flux-tiny", "prompt": "x", "num_frames": 5},
            grpc.StatusCode.INVALID_ARGUMENT,
            "num_frames",
        ),
        (
            {"model": "wan-tiny", "prompt": "x", "num_frames": 6},
            grpc.StatusCode.INVALID_ARGUMENT,
            "multiple of 4",
        ),
        (
            {"model": "stable-audio-tiny", "prompt": "x", "duration_s": 60},
            grpc.StatusCode.INVALID_ARGUMENT,
            "duration_s",
        ),
        (
            {"model": "flux-tiny", "prompt": "x", "priority": 9},
            grpc.StatusCode.INVALID_ARGUMENT,
            "priority",
        ),
    ],
)
async def test_bad_input_is_rejected_with_field_and_limit(image_mesh, fields, code, words):
    stub = image_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(common_pb2.GenerateRequest(**fields))
    assert caught.value.code() == code
    assert words in caught.value.details()
    assert len(image_mesh.core.jobs) == 0


async def test_unknown_job_is_not_found(image_mesh):
    stub = image_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetJob(gateway_pb2.GetJobRequest(job_id="missing"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_cancel_a_queued_job_at_once(tmp_path, models_dir):
    mesh = await start_mesh(tmp_path, models_dir, [])  # no worker: the job stays queued
    try:
        stub = mesh.gateway_stub()
        handle = await stub.Submit(common_pb2.GenerateRequest(model="flux-tiny", prompt="x"))
        info = await stub.Cancel(gateway_pb2.CancelRequest(job_id=handle.job_id))
        assert info.state == common_pb2.CANCELLED
        events = await collect(stub.Watch(gateway_pb2.WatchRequest(job_id=handle.job_id)))
        assert events[-1].error.code == "CANCELLED"
    finally:
        await stop_mesh(mesh)


async def test_timeout_expires_a_job_that_cannot_run(tmp_path, models_dir):
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        stub = mesh.gateway_stub()
        events = await collect(
            stub.Generate(common_pb2.GenerateRequest(model="echo", prompt="x", timeout_ms=300))
        )
        assert events[-1].state == common_pb2.EXPIRED
        assert events[-1].error.code == "DEADLINE_EXCEEDED"
    finally:
        await stop_mesh(mesh)


async def test_internal_services_need_the_token_but_health_is_open(tmp_path, models_dir):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from mediamesh.common.generated.v1 import scheduler_pb2, scheduler_pb2_grpc

    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], token="s3cret")
    try:
        address = f"127.0.0.1:{mesh.scheduler.port}"
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await scheduler_pb2_grpc.SchedulerStub(channel).GetStatus(
                    scheduler_pb2.GetStatusRequest()
                )
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        events = await collect(
            mesh.gateway_stub().Generate(common_pb2.GenerateRequest(model="echo", prompt="x"))
        )
        assert events[-1].HasField("result")
    finally:
        await stop_mesh(mesh)


async def test_reflection_lists_every_service(image_mesh):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    for port, expected in (
        (image_mesh.gateway.port, "mediamesh.v1.Gateway"),
        (image_mesh.scheduler.port, "mediamesh.v1.Scheduler"),
        (image_mesh.workers[0].port, "mediamesh.v1.Worker"),
    ):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            replies = [r async for r in stub.ServerReflectionInfo(iter([request]))]
            names = {s.name for s in replies[0].list_services_response.service}
            assert {expected, "grpc.health.v1.Health"} <= names


async def test_jobs_of_a_full_batch_share_one_dispatch(image_mesh):
    stub = image_mesh.gateway_stub()
    requests = [common_pb2.GenerateRequest(model="echo", prompt=f"p{i}", seed=i) for i in range(6)]
    results = await asyncio.gather(*(collect(stub.Generate(r)) for r in requests))
    assert all(events[-1].HasField("result") for events in results)
