"""BatchLink end to end over gRPC: the scheduler's link sends a worker's batches over one
stream, each ending as its own RunBatch call would have; a worker without BatchLink still
gets its batches, by RunBatch calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import grpc
import pytest

from mediamesh.common.api import worker_wire
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.errors import InvalidArgument, MeshError, StatusCode, Unavailable
from mediamesh.common.generated.v1 import worker_pb2
from mediamesh.common.generation import GenerationParams
from mediamesh.common.limits import MAX_PROMPT_CHARS
from mediamesh.common.work import JobFinished, JobParams, StepDone, WorkerEvent
from mediamesh.scheduler.api.worker_link import (
    LINK_MAX_BATCH_BYTES,
    GrpcWorkerLink,
    results_estimate_bytes,
)
from mediamesh.scheduler.batches import BatchUndelivered, WorkerGone
from mediamesh.worker.api.servicer import WorkerServicer, adder

STEPS = 2


@dataclass
class FakeRuntime:
    """Runs batches without a model: each job takes STEPS steps, then finishes. A batch whose
    model is `hold` waits for `release` before its last step; `fail-<code>` raises."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    traces: dict[str, dict[str, str]] = field(default_factory=dict)

    def started_event(self, batch_id: str) -> asyncio.Event:
        return self.started.setdefault(batch_id, asyncio.Event())

    async def run_batch_groups(
        self,
        batch_id: str,
        model: str,
        jobs: list[JobParams],
        pause_batch_id: str = "",
        *,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[WorkerEvent]]:
        self.traces[batch_id] = dict(trace_carrier or {})
        self.started_event(batch_id).set()
        try:
            if model.startswith("fail-"):
                code = model.removeprefix("fail-")
                if code == "UNAVAILABLE":
                    raise Unavailable("the devices are gone")
                if code == "INVALID_ARGUMENT":
                    raise InvalidArgument("an adapter that fits no layer")
                raise RuntimeError("a bug")
            for step in range(1, STEPS + 1):
                if step == STEPS and model == "hold":
                    await self.release.wait()
                yield [StepDone(j.job_id, step, STEPS, 0.001) for j in jobs]
            yield [
                JobFinished(j.job_id, f"{batch_id}/{j.job_id}".encode(), "text/plain", 0)
                for j in jobs
            ]
            self.finished.append(batch_id)
        except (asyncio.CancelledError, GeneratorExit):
            self.stopped.append(batch_id)
            raise


class CallCounter(grpc.aio.ServerInterceptor):
    """Counts the calls the worker's server receives, by method name."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        name = details.method.rsplit("/", 1)[-1]
        self.calls[name] = self.calls.get(name, 0) + 1
        return await continuation(details)


@dataclass
class Worker:
    runtime: FakeRuntime
    servicer: WorkerServicer
    server: grpc.aio.Server
    counter: CallCounter
    address: str


@contextlib.asynccontextmanager
async def worker(link: GrpcWorkerLink, *, batch_link: bool = True) -> AsyncIterator[Worker]:
    """A worker serving on loopback; on the way out the scheduler's side closes first and the
    server then stops with a grace, as a mesh stops: a server stopped at once under open
    streams leaves gRPC operations to complete after this test's event loop has closed."""
    runtime = FakeRuntime()
    servicer = WorkerServicer(runtime, lambda *_: None)  # type: ignore[arg-type]
    counter = CallCounter()
    server = grpc.aio.server(interceptors=[counter])
    if batch_link:
        adder(servicer)(server)
    else:
        add_older_worker(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield Worker(runtime, servicer, server, counter, f"127.0.0.1:{port}")
    finally:
        await link.close()
        servicer.links.close()
        await server.stop(1.0)


def add_older_worker(servicer: WorkerServicer, server: grpc.aio.Server) -> None:
    """A worker of a release before BatchLink: its service has no such method, so gRPC
    itself answers UNIMPLEMENTED. (The generated base class's method, which sets that code
    and raises, raced the scheduler's first write now and then: the call ended INTERNAL,
    "Internal error from Core".)"""
    run_batch = grpc.unary_stream_rpc_method_handler(
        servicer.RunBatch,
        request_deserializer=worker_pb2.RunBatchRequest.FromString,
        response_serializer=worker_pb2.BatchEvent.SerializeToString,
    )
    service = worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {"RunBatch": run_batch}),)
    )


@pytest.fixture
async def link() -> AsyncIterator[GrpcWorkerLink]:
    link = GrpcWorkerLink(InternalCredentials(), max_message_bytes=4 << 20)
    yield link
    await link.close()


def jobs(batch_id: str, count: int = 2, prompt: str = "a fox") -> list[JobParams]:
    return [
        JobParams(f"{batch_id}-j{i}", GenerationParams(prompt, steps=STEPS)) for i in range(count)
    ]


async def run(
    link: GrpcWorkerLink, address: str, batch_id: str, model: str = "echo"
) -> list[WorkerEvent]:
    return [
        e async for group in link.run_batch(address, batch_id, model, jobs(batch_id)) for e in group
    ]


def finished(events: list[WorkerEvent]) -> dict[str, bytes]:
    return {e.job_id: e.data for e in events if isinstance(e, JobFinished)}


async def test_batches_share_one_stream_and_each_gets_its_own_events(link) -> None:
    async with worker(link) as w:
        results = await asyncio.wait_for(
            asyncio.gather(*(run(link, w.address, f"b{i}") for i in range(4))), 20
        )
        for i, events in enumerate(results):
            assert finished(events) == {f"b{i}-j{j}": f"b{i}/b{i}-j{j}".encode() for j in range(2)}
            steps = [(e.job_id, e.step) for e in events if isinstance(e, StepDone)]
            assert sorted(steps) == sorted((f"b{i}-j{j}", s) for j in range(2) for s in (1, 2))
        await run(link, w.address, "b-later")
        # Five batches, one call: the stream stays open between them.
        assert w.counter.calls == {"BatchLink": 1}


async def test_leaving_a_batch_early_stops_it_on_the_worker_and_nothing_else(link) -> None:
    async with worker(link) as w:
        held = link.run_batch(w.address, "held", "hold", jobs("held"))
        first = await asyncio.wait_for(anext(held), 10)
        assert [e.step for e in first] == [1, 1]
        await held.aclose()  # the scheduler no longer wants it (its jobs were cancelled)
        await until(lambda: w.runtime.stopped == ["held"])
        # The stream goes on carrying other batches.
        assert finished(await asyncio.wait_for(run(link, w.address, "next"), 10))
        assert w.counter.calls == {"BatchLink": 1}


async def test_a_refused_batch_is_undelivered_and_the_others_run(link) -> None:
    too_long = "x" * (4 * MAX_PROMPT_CHARS + 1)
    async with worker(link) as w:
        refused = link.run_batch(w.address, "refused", "echo", jobs("refused", prompt=too_long))
        beside = asyncio.create_task(run(link, w.address, "beside"))
        with pytest.raises(BatchUndelivered, match=r"INVALID_ARGUMENT.*prompt"):
            await asyncio.wait_for(anext(refused), 10)
        assert finished(await asyncio.wait_for(beside, 10))
        assert "refused" not in w.runtime.started


async def test_a_batch_id_already_open_is_refused_without_touching_the_open_one(link) -> None:
    async with worker(link) as w:
        held = link.run_batch(w.address, "same", "hold", jobs("same"))
        await asyncio.wait_for(anext(held), 10)
        stream = link._stream(w.address)
        with pytest.raises(BatchUndelivered, match="already open"):
            await anext(stream.run(_request("same"), {}))
        w.runtime.release.set()
        rest = [e async for group in held for e in group]
        assert set(finished(rest)) == {"same-j0", "same-j1"}


@pytest.mark.parametrize(
    ("model", "raised", "code"),
    [
        ("fail-UNAVAILABLE", WorkerGone, None),
        ("fail-INVALID_ARGUMENT", MeshError, StatusCode.INVALID_ARGUMENT),
        ("fail-INTERNAL", MeshError, StatusCode.INTERNAL),
    ],
)
async def test_a_batch_that_fails_on_the_worker_ends_as_its_call_would_have(
    link, model, raised, code
) -> None:
    async with worker(link) as w:
        with pytest.raises(raised) as failure:
            await asyncio.wait_for(run(link, w.address, "failing", model), 10)
        if code is not None:
            assert failure.value.code is code  # type: ignore[attr-defined]
        # The stream outlives the failure.
        assert finished(await asyncio.wait_for(run(link, w.address, "after"), 10))
        assert w.counter.calls == {"BatchLink": 1}


async def test_a_stopping_worker_refuses_new_batches_and_finishes_open_ones(link) -> None:
    async with worker(link) as w:
        held = link.run_batch(w.address, "open", "hold", jobs("open"))
        await asyncio.wait_for(anext(held), 10)
        w.servicer.links.close()
        with pytest.raises(BatchUndelivered, match=r"UNAVAILABLE.*stopping"):
            await asyncio.wait_for(run(link, w.address, "late"), 10)
        w.runtime.release.set()
        rest = [e async for group in held for e in group]
        assert set(finished(rest)) == {"open-j0", "open-j1"}
        assert "late" not in w.runtime.started
        # Its open batch done, the worker ended the stream: the next batch opens another,
        # which a stopping worker refuses at once as well.
        with pytest.raises(BatchUndelivered):
            await asyncio.wait_for(run(link, w.address, "later"), 10)


async def test_a_worker_lost_mid_batch_is_worker_gone_and_a_new_stream_follows(link) -> None:
    async with worker(link) as w:
        held = link.run_batch(w.address, "lost", "hold", jobs("lost"))
        await asyncio.wait_for(anext(held), 10)
        await w.server.stop(None)
        with pytest.raises(WorkerGone):
            async for _ in held:
                pass
        await until(lambda: w.runtime.stopped == ["lost"])
    async with worker(link) as again:
        assert finished(await asyncio.wait_for(run(link, again.address, "fresh"), 10))


async def test_a_batch_with_large_results_takes_a_call_of_its_own(link) -> None:
    """Its results would hold every other batch's messages behind them on the stream."""
    side = 1 + int((LINK_MAX_BATCH_BYTES / 2 / 3) ** 0.5)  # two jobs just past the limit
    big = [
        JobParams(f"big-j{i}", GenerationParams("a fox", width=side, height=side)) for i in range(2)
    ]
    assert results_estimate_bytes(big) > LINK_MAX_BATCH_BYTES >= results_estimate_bytes(big[:1])
    async with worker(link) as w:
        events = [e async for group in link.run_batch(w.address, "big", "echo", big) for e in group]
        assert set(finished(events)) == {"big-j0", "big-j1"}
        await run(link, w.address, "small")
        assert w.counter.calls == {"RunBatch": 1, "BatchLink": 1}


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.mark.parametrize("batch_link", [True, False], ids=["stream", "call"])
async def test_an_untraced_scheduler_sends_the_first_jobs_trace_for_the_workers_logs(
    link, batch_link
) -> None:
    """This process does not trace: without the job's own trace context the worker's log
    lines about the batch would name no trace."""
    async with worker(link, batch_link=batch_link) as w:
        batch = jobs("traced")
        stream = link.run_batch(
            w.address, "traced", "echo", batch, trace_context={"traceparent": TRACEPARENT}
        )
        assert finished([e async for group in stream for e in group])
        await run(link, w.address, "untraced")
    assert w.runtime.traces["traced"] == {"traceparent": TRACEPARENT}
    assert w.runtime.traces["untraced"] == {}


async def test_a_worker_without_batch_link_gets_its_batches_by_run_batch_calls(link) -> None:
    async with worker(link, batch_link=False) as w:
        for batch_id in ("old-1", "old-2"):
            events = await asyncio.wait_for(run(link, w.address, batch_id), 10)
            assert set(finished(events)) == {f"{batch_id}-j0", f"{batch_id}-j1"}
        # One try of the stream, then a call per batch: the first batch was not lost.
        assert w.counter.calls == {"BatchLink": 1, "RunBatch": 2}
        # A worker registering again at the address may be a newer release: tried again.
        link.reset(w.address)
        await run(link, w.address, "old-3")
        assert w.counter.calls == {"BatchLink": 2, "RunBatch": 3}


def _request(batch_id: str) -> worker_pb2.RunBatchRequest:
    return worker_pb2.RunBatchRequest(
        batch_id=batch_id, model="echo", jobs=[worker_wire.job_spec(j, 0) for j in jobs(batch_id)]
    )


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)
