"""The gateway's JobLink: final-only jobs share one stream to the scheduler, a refusal or a
caller leaving touches its own exchange alone (cancelling its job when asked, even before the
job is named), and a broken stream fails the open exchanges
as unreachable and is opened again for the next job."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generated.inference import grpc_service_pb2 as kserve_pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as kserve_grpc
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, TenantSettings
from mediamesh.gateway.api.job_link import _Stream
from mediamesh.gateway.api.upstream import LINK_MAX_INPUT_BYTES, UNREACHABLE_MESSAGE, Upstream
from mediamesh.gateway.core.tenancy import Caller, Tenancy
from mediamesh.gateway.metrics import JOB_LINK_EXCHANGES, JOB_LINK_STREAMS
from mediamesh.scheduler.api.job_link import serve_job_link
from tests.job_link_stand_in import StandIn
from tests.service.conftest import start_mesh, stop_mesh


class LinkedScheduler(scheduler_pb2_grpc.SchedulerServicer):
    """The real JobLink serving, over the stand-in's jobs; counts the streams opened."""

    def __init__(self) -> None:
        self.stand_in = StandIn(retry_after_s=2)
        self.streams = 0
        # SubmitAndWatch calls: the jobs that did not go over the link.
        self.calls = 0

    async def SubmitAndWatch(self, request, context):  # type: ignore[no-untyped-def]
        self.calls += 1
        async for event in self.stand_in.follow(request, {}):
            yield event

    async def JobLink(self, requests, context):  # type: ignore[no-untyped-def]
        self.streams += 1
        async for events in serve_job_link(requests, self.stand_in.follow, self.stand_in.cancel):
            yield events


async def serve(scheduler: LinkedScheduler, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


def upstream_over(channel: grpc.aio.Channel) -> Upstream:
    tenancy = Tenancy(GatewaySettings(), time.monotonic)
    return Upstream.over(channel, load_registry(), tenancy, 1 << 20, 1 << 26)


@contextlib.asynccontextmanager
async def linked_upstream(scheduler: LinkedScheduler) -> AsyncIterator[Upstream]:
    """An upstream whose link reaches `scheduler`, served for the block's length."""
    server, port = await serve(scheduler)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            up = upstream_over(channel)
            yield up
            await up.aclose()
    finally:
        await server.stop(None)


async def final_event(up: Upstream, prompt: str, model: str = "echo") -> common_pb2.GenerateEvent:
    request = common_pb2.GenerateRequest(model=model, prompt=prompt)
    events = [e async for e in up.submit_and_watch(request, CALLER, 0, final_only=True)]
    assert events[0].state == common_pb2.QUEUED
    return events[-1]


CALLER = Caller("t", TenantSettings())


async def test_jobs_share_one_stream_and_a_refusal_ends_its_own_exchange() -> None:
    scheduler = LinkedScheduler()
    async with linked_upstream(scheduler) as up:
        prompts = [f"job-{i}" for i in range(30)]
        finals = await asyncio.gather(*(final_event(up, p) for p in prompts))
        assert [f.result.data.decode() for f in finals] == prompts
        with pytest.raises(MeshError) as refused:
            await final_event(up, "refused", "refused")
        assert refused.value.code is StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.message == "the image queue is full"
        assert refused.value.retry_after_s == 2
        assert (await final_event(up, "after")).result.data == b"after"
        assert scheduler.streams == 1


async def test_a_job_with_large_inline_inputs_takes_a_call_of_its_own() -> None:
    scheduler = LinkedScheduler()
    async with linked_upstream(scheduler) as up:
        for size, prompt in ((LINK_MAX_INPUT_BYTES + 1, "large"), (LINK_MAX_INPUT_BYTES, "at")):
            half = size // 2
            request = common_pb2.GenerateRequest(
                model="echo", prompt=prompt, image=b"i" * half, mask_image=b"m" * (size - half)
            )
            events = [e async for e in up.submit_and_watch(request, CALLER, 0, final_only=True)]
            assert events[-1].result.data == prompt.encode()
            if prompt == "large":
                # Alone on its own stream: on the link it would hold every other job's
                # messages behind it while it crossed.
                assert (scheduler.calls, scheduler.streams) == (1, 0)
        assert (scheduler.calls, scheduler.streams) == (1, 1)


async def test_a_caller_that_leaves_stops_its_exchange_and_no_other() -> None:
    scheduler = LinkedScheduler()
    async with linked_upstream(scheduler) as up:
        request = common_pb2.GenerateRequest(model="hold", prompt="hold")
        events = up.submit_and_watch(request, CALLER, 0, final_only=True)
        assert (await anext(events)).state == common_pb2.QUEUED
        await events.aclose()
        for _ in range(100):
            if scheduler.stand_in.stopped:
                break
            await asyncio.sleep(0.01)
        assert scheduler.stand_in.stopped == ["hold"]
        assert (await final_event(up, "next")).result.data == b"next"


async def test_a_caller_that_leaves_before_its_job_is_named_can_still_cancel_it() -> None:
    scheduler = LinkedScheduler()
    stand_in = scheduler.stand_in
    async with linked_upstream(scheduler) as up:
        request = common_pb2.GenerateRequest(model="slow-submit", prompt="unwanted")
        events = up.submit_and_watch(request, CALLER, 0, final_only=True, cancel_when_left=True)
        opening = asyncio.create_task(anext(events))
        await asyncio.sleep(0.2)  # the submit reaches the scheduler and waits there
        opening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await opening
        stand_in.submitted.set()
        for _ in range(100):
            if stand_in.cancelled:
                break
            await asyncio.sleep(0.01)
        assert stand_in.cancelled == [("unwanted", "t")]
        assert (await final_event(up, "next")).result.data == b"next"


async def test_a_broken_stream_fails_open_exchanges_and_the_next_job_opens_another() -> None:
    streams_before = JOB_LINK_STREAMS._value.get()
    first = LinkedScheduler()
    server, port = await serve(first)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        up = upstream_over(channel)
        waiting = asyncio.create_task(final_event(up, "hold", "hold"))
        await asyncio.sleep(0.2)
        await server.stop(None)
        with pytest.raises(MeshError) as broken:
            await asyncio.wait_for(waiting, 10)
        assert broken.value.code is StatusCode.UNAVAILABLE
        assert broken.value.message == UNREACHABLE_MESSAGE
        second = LinkedScheduler()
        server, _ = await serve(second, port)
        try:
            # The channel reconnects on its own; the link opens a new stream on it.
            for _ in range(50):
                try:
                    final = await final_event(up, "again")
                    break
                except MeshError:
                    await asyncio.sleep(0.1)
            assert final.result.data == b"again"
            assert second.streams == 1
            # Operators see the break: a second stream opened, and nothing left open.
            assert JOB_LINK_STREAMS._value.get() == streams_before + 2
            assert JOB_LINK_EXCHANGES._value.get() == 0
            await up.aclose()
        finally:
            await server.stop(None)


def _scheduler_calls(method: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            labels = sample.labels
            if sample.name == "mediamesh_rpc_requests_total" and labels.get("method") == method:
                total += sample.value
    return total


async def test_kserve_and_generate_calls_through_a_mesh_make_no_call_per_job(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        before = _scheduler_calls("SubmitAndWatch")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}") as channel:
            stub = kserve_grpc.GRPCInferenceServiceStub(channel)

            async def infer(index: int) -> kserve_pb.ModelInferResponse:
                prompt = kserve_pb.ModelInferRequest.InferInputTensor(
                    name="prompt",
                    datatype="BYTES",
                    shape=[1],
                    contents=kserve_pb.InferTensorContents(bytes_contents=[b"p%d" % index]),
                )
                request = kserve_pb.ModelInferRequest(model_name="echo", inputs=[prompt])
                return await stub.ModelInfer(request, timeout=30)

            answers = await asyncio.gather(*(infer(i) for i in range(24)))
            generate = common_pb2.GenerateRequest(model="echo", prompt="native", steps=3)
            events = [e async for e in mesh.gateway_stub().Generate(generate, timeout=30)]
        assert all(a.outputs for a in answers)
        assert [e.WhichOneof("event") for e in events][-4:] == [*["progress"] * 3, "result"]
        assert _scheduler_calls("SubmitAndWatch") == before
        # An exchange's span outlives the generator's frames it is made in: made current
        # there, its end logged "Failed to detach context" with a traceback, every call.
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        await stop_mesh(mesh)


async def test_a_fault_in_the_link_fails_its_exchanges_instead_of_leaving_them_waiting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = LinkedScheduler()
    async with linked_upstream(scheduler) as up:
        route = _Stream._route

        def faulty(stream: _Stream, event: scheduler_pb2.JobLinkEvent) -> None:
            raise RuntimeError("a bug in routing")

        monkeypatch.setattr(_Stream, "_route", faulty)
        with pytest.raises(MeshError) as failed:
            await asyncio.wait_for(final_event(up, "first"), 10)
        assert failed.value.code is StatusCode.UNAVAILABLE
        assert failed.value.message == "the gateway's link to the scheduler failed; retry"
        assert "the JobLink stream's reader failed" in caplog.text
        monkeypatch.setattr(_Stream, "_route", route)
        assert (await final_event(up, "second")).result.data == b"second"
        assert scheduler.streams == 2
