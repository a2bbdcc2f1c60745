"""The fuzz tier, internal side, shorter: every rpc of mediamesh.v1.Scheduler and of
mediamesh.v1.Worker, called with the valid internal credential (and now and then without it).

A caller holding the credential is trusted to be a gateway or a worker, not to be right: a
request the scheduler or a worker cannot use gets a deliberate status, never UNKNOWN or
INTERNAL or silence, and both stay healthy. Drain, the one rpc that changes a worker for
good, runs against a worker of its own.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mediamesh.common.api.health import answers_serving
from mediamesh.common.api.status import from_number
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2, worker_pb2
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.limits import BATCH_ID_PATTERN, JOB_ID_PATTERN, WORKER_ID_PATTERN
from tests.fuzz.conftest import INTERNAL_TOKEN, echo_registry, fuzz_settings
from tests.fuzz.harness import UNDELIBERATE, Call, Probe, blocking_channel, path_of
from tests.fuzz.strategies import Hints, messages, raw_requests, variations
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, auth

pytestmark = [pytest.mark.fuzz, pytest.mark.asyncio(loop_scope="module")]

SCHEDULER = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"]
WORKER = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
METHODS = [*SCHEDULER.methods, *(m for m in WORKER.methods if m.name != "Drain")]
IDS = [f"{m.containing_service.name}/{m.name}" for m in METHODS]
# Examples per rpc (fuzz-ci profile): structured requests, then raw bytes.
STRUCTURED_EXAMPLES = 50
RAW_EXAMPLES = 20
DRAIN_EXAMPLES = 15
MAX_STREAMED = 4

ECHO = echo_registry().models[0]
PROMPT = "a red fox"
TOKEN = ((INTERNAL_TOKEN_KEY, INTERNAL_TOKEN),)
VALID_SPEC = worker_pb2.JobSpec(
    job_id="fuzz-job", prompt=PROMPT, steps=1, seed=7, width=16, height=16
)
BASES = {
    "mediamesh.v1.SubmitRequest": scheduler_pb2.SubmitRequest(
        request=common_pb2.GenerateRequest(model=ECHO.name, prompt=PROMPT), tenant="a"
    ),
    "mediamesh.v1.RunBatchRequest": worker_pb2.RunBatchRequest(
        batch_id="fuzz-batch", model=ECHO.name, jobs=[VALID_SPEC]
    ),
}
BASES["mediamesh.v1.JobLinkRequests"] = scheduler_pb2.JobLinkRequests(
    requests=[
        scheduler_pb2.JobLinkRequest(exchange_id=1, submit=BASES["mediamesh.v1.SubmitRequest"]),
        scheduler_pb2.JobLinkRequest(exchange_id=2, stop=True),
    ]
)


def _batch(**job: int | str) -> bytes:
    spec = worker_pb2.JobSpec()
    spec.CopyFrom(VALID_SPEC)
    for name, value in job.items():
        setattr(spec, name, value)
    request = worker_pb2.RunBatchRequest(batch_id="fuzz-batch", model=ECHO.name, jobs=[spec])
    return request.SerializeToString()


# Not protobuf at all (a varint cut short), and a string field (SubmitRequest.tenant,
# RunBatchRequest.batch_id) holding invalid UTF-8: gRPC's deserializer raised, and the
# scheduler and the workers answered UNKNOWN.
_UNPARSABLE = [b"\x80", b"\x12\x01\xff"]
_BAD_BATCH_ID = b"\x0a\x01\xff"
# Requests that once made the scheduler or a worker answer badly, kept as explicit examples.
REGRESSIONS: dict[str, list[bytes]] = {
    "/mediamesh.v1.Scheduler/Submit": _UNPARSABLE,
    "/mediamesh.v1.Scheduler/SubmitAndWatch": _UNPARSABLE,
    "/mediamesh.v1.Worker/RunBatch": [
        # 2**32 - 1 steps: the echo job held the worker's one device thread for good.
        _batch(steps=2**32 - 1),
        # A seed past int64, and an image 2**32 - 1 pixels wide: INTERNAL job errors.
        _batch(seed=2**64 - 1),
        _batch(width=2**32 - 1),
        # An output format of no modality: the encoder failed the job with INTERNAL.
        _batch(output_format="0"),
        _UNPARSABLE[0],
        _BAD_BATCH_ID,
    ],
}


def hints() -> Hints:
    """Names the services know, drawn alongside the generic values."""
    limit = ECHO.limits.max_prompt_chars
    model = st.just(ECHO.name)
    tenants = st.sampled_from(["a", "b", "default", "A", ""])
    small = st.integers(-1, 9)
    sizes = st.sampled_from([0, 8, 16, 64, 72, 2**32 - 1])
    now_ms = int(time.time() * 1000)
    spec, generate = "mediamesh.v1.JobSpec", "mediamesh.v1.GenerateRequest"
    return {
        (generate, "model"): model,
        (generate, "prompt"): st.sampled_from([PROMPT, "a" * (limit + 1)]),
        ("mediamesh.v1.SubmitRequest", "tenant"): tenants,
        ("mediamesh.v1.SubmitRequest", "deadline_unix_ms"): st.sampled_from(
            [0, 1, now_ms - 1000, now_ms + 60_000]
        ),
        ("mediamesh.v1.ScopedJobRequest", "tenant"): tenants,
        # Few ids, so that exchanges collide and stops find them.
        ("mediamesh.v1.JobLinkRequest", "exchange_id"): st.integers(0, 3),
        ("mediamesh.v1.ScopedJobRequest", "job_id"): st.from_regex(JOB_ID_PATTERN, fullmatch=True),
        ("mediamesh.v1.WorkerRegistration", "worker_id"): st.from_regex(
            WORKER_ID_PATTERN, fullmatch=True
        ),
        ("mediamesh.v1.WorkerRegistration", "address"): st.just("127.0.0.1:9"),
        ("mediamesh.v1.WorkerRegistration", "pool"): st.sampled_from(["on-demand", "spot"]),
        ("mediamesh.v1.HostedModel", "name"): model,
        ("mediamesh.v1.BatchesEnded", "batch_ids"): st.from_regex(BATCH_ID_PATTERN, fullmatch=True),
        ("mediamesh.v1.RunBatchRequest", "model"): model,
        (spec, "prompt"): st.sampled_from([PROMPT, "a" * (limit + 1)]),
        (spec, "steps"): small,
        (spec, "width"): sizes,
        (spec, "height"): sizes,
        (spec, "resume_checkpoint"): st.sampled_from(["", "/nonexistent/fuzz.pt", "/dev/null"]),
    }


def requests_for(method: object, known: Hints) -> st.SearchStrategy[bytes]:
    descriptor = method.input_type  # type: ignore[attr-defined]
    choices = [messages(descriptor, known)]
    if descriptor.full_name in BASES:
        choices.append(variations(BASES[descriptor.full_name], known))
    specs = st.lists(variations(VALID_SPEC, known), min_size=1, max_size=3)
    if descriptor.full_name == "mediamesh.v1.RunBatchRequest":
        choices.append(
            specs.map(lambda jobs: worker_pb2.RunBatchRequest(model=ECHO.name, jobs=jobs))
        )
    if descriptor.full_name == "mediamesh.v1.BatchLinkRequests":
        # Runnable batches under few ids, so that they collide and stops find them.
        run = st.builds(
            lambda batch_id, jobs: worker_pb2.BatchLinkRequest(
                run=worker_pb2.RunBatchRequest(batch_id=batch_id, model=ECHO.name, jobs=jobs)
            ),
            st.sampled_from(["b0", "b1"]),
            specs,
        )
        stop = st.sampled_from(["b0", "b1"]).map(lambda b: worker_pb2.BatchLinkRequest(stop=b))
        choices.append(
            st.lists(st.one_of(run, stop), min_size=1, max_size=3).map(
                lambda requests: worker_pb2.BatchLinkRequests(requests=requests)
            )
        )
    return st.one_of(choices).map(lambda m: m.SerializeToString())


# Mostly the valid credential: without it every call is UNAUTHENTICATED and tests nothing more.
METADATA = st.integers(0, 7).flatmap(
    lambda n: st.just(TOKEN) if n < 7 else st.sampled_from([(), ((INTERNAL_TOKEN_KEY, "x"),)])
)


def calls(
    method: object, requests: st.SearchStrategy[bytes], metadata: object
) -> st.SearchStrategy:
    streaming = method.client_streaming  # type: ignore[attr-defined]
    count = st.integers(0, MAX_STREAMED) if streaming else st.just(1)
    bodies = count.flatmap(lambda n: st.lists(requests, min_size=n, max_size=n))
    return st.builds(Call, st.just(method), bodies.map(tuple), metadata)  # type: ignore[arg-type]


def _code_is_deliberate(code: str, what: object) -> None:
    assert code not in {c.name for c in UNDELIBERATE}, what


def check_event(data: bytes) -> None:
    event = common_pb2.GenerateEvent.FromString(data)
    if event.HasField("error"):
        _code_is_deliberate(event.error.code, event.error)


def check_batch_event(data: bytes) -> None:
    event = worker_pb2.BatchEvent.FromString(data)
    if event.HasField("error"):
        _code_is_deliberate(event.error.code, event.error)


def check_link_events(data: bytes) -> None:
    for linked in scheduler_pb2.JobLinkEvents.FromString(data).events:
        if linked.HasField("status"):
            _code_is_deliberate(from_number(linked.status.code).name, linked.status)
        elif linked.event.HasField("error"):
            _code_is_deliberate(linked.event.error.code, linked.event.error)


def check_batch_link_events(data: bytes) -> None:
    for linked in worker_pb2.BatchLinkEvents.FromString(data).events:
        if linked.HasField("end"):
            _code_is_deliberate(from_number(linked.end.code).name, linked.end)
        elif linked.HasField("event") and linked.event.HasField("error"):
            _code_is_deliberate(linked.event.error.code, linked.event.error)


def probe_of(scheduler: grpc.Channel, worker: grpc.Channel) -> Probe:
    checks = {
        path_of(SCHEDULER.methods_by_name["Watch"]): check_event,
        path_of(SCHEDULER.methods_by_name["JobLink"]): check_link_events,
        path_of(WORKER.methods_by_name["RunBatch"]): check_batch_event,
        path_of(WORKER.methods_by_name["BatchLink"]): check_batch_link_events,
    }
    return Probe({SCHEDULER.full_name: scheduler, WORKER.full_name: worker}, checks)


def _fuzz(probe: Probe, method: object, strategy: st.SearchStrategy, examples: int) -> None:
    def check(call: Call) -> None:
        probe.call(call)

    test = given(call=strategy)(check)
    for request in REGRESSIONS.get(path_of(method), []):  # type: ignore[arg-type]
        test = example(call=Call(method, (request,), TOKEN))(test)  # type: ignore[arg-type]
    fuzz_settings(examples)(test)()


async def assert_healthy(mesh: InProcessMesh) -> None:
    """Scheduler and worker report SERVING, and a Generate through the gateway ends in a
    result (a fuzzed registration may have stood in for the worker for a moment: its own
    session registers it again at its next heartbeat)."""
    stub = mesh.gateway_stub()
    for port in (mesh.scheduler.port, mesh.workers[0].port):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        mesh.channels.append(channel)
        assert await answers_serving(channel, 5)
    request = common_pb2.GenerateRequest(model=ECHO.name, prompt=PROMPT, timeout_ms=20_000)
    events = [e async for e in stub.Generate(request, metadata=auth(KEY_A), timeout=30)]
    assert events[-1].HasField("result"), events[-1]


def _channels(mesh: InProcessMesh) -> tuple[grpc.Channel, grpc.Channel]:
    return (
        blocking_channel(f"127.0.0.1:{mesh.scheduler.port}"),
        blocking_channel(f"127.0.0.1:{mesh.workers[0].port}"),
    )


@pytest.mark.parametrize("method", METHODS, ids=IDS)
async def test_structured_internal_requests_get_a_deliberate_answer(fuzz_mesh, method):
    strategy = calls(method, requests_for(method, hints()), METADATA)
    scheduler, worker = _channels(fuzz_mesh)
    with scheduler, worker:
        probe = probe_of(scheduler, worker)
        await asyncio.to_thread(_fuzz, probe, method, strategy, STRUCTURED_EXAMPLES)
    await assert_healthy(fuzz_mesh)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
async def test_internal_bytes_that_are_no_request_get_a_deliberate_answer(fuzz_mesh, method):
    strategy = calls(method, raw_requests(method.input_type, hints()), st.just(TOKEN))
    scheduler, worker = _channels(fuzz_mesh)
    with scheduler, worker:
        probe = probe_of(scheduler, worker)
        await asyncio.to_thread(_fuzz, probe, method, strategy, RAW_EXAMPLES)
    await assert_healthy(fuzz_mesh)


async def test_drain_gets_a_deliberate_answer(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], token=INTERNAL_TOKEN)
    method = WORKER.methods_by_name["Drain"]
    requests = st.one_of(requests_for(method, hints()), raw_requests(method.input_type))
    strategy = calls(method, requests, METADATA)
    try:
        scheduler, worker = _channels(mesh)
        with scheduler, worker:
            probe = probe_of(scheduler, worker)
            await asyncio.to_thread(_fuzz, probe, method, strategy, DRAIN_EXAMPLES)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.workers[0].port}")
        mesh.channels.append(channel)
        # Drained on request: no longer ready for work, and saying so.
        assert not await answers_serving(channel, 5)
        assert await answers_serving(channel, 5, "liveness")
    finally:
        await stop_mesh(mesh)
