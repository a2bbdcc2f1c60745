"""The fuzz tier, public side: every rpc of mediamesh.v1.Gateway and of the KServe
inference.GRPCInferenceService, as the gateway serves them.

Requests are generated from the message descriptors (tests/fuzz/strategies.py): any value in
every field, strings and bytes at and past their limits, KServe parameters of every kind under
every name, tensors whose shape, datatype and contents disagree, and bytes that are no valid
protobuf at all. Whatever arrives, the gateway answers with a deliberate status (never UNKNOWN
or INTERNAL, and never silence), and afterwards it is still SERVING and still generates.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
import pytest_asyncio
from hypothesis import example, given
from hypothesis import strategies as st

from mediamesh.common.api.health import answers_serving
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.gateway.core.inference_call import KNOWN_PARAMETERS
from mediamesh.gateway.core.tensors import join_bytes_tensor
from tests.fuzz.conftest import echo_registry, fuzz_settings
from tests.fuzz.harness import UNDELIBERATE, Call, Probe, blocking_channel, path_of
from tests.fuzz.strategies import Hints, integers_of, messages, raw_requests, variations
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth

pytestmark = [pytest.mark.fuzz, pytest.mark.asyncio(loop_scope="module")]

GATEWAY = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
INFERENCE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
METHODS = [*GATEWAY.methods, *INFERENCE.methods]
IDS = [f"{m.containing_service.name}/{m.name}" for m in METHODS]
# Examples per rpc (fuzz-ci profile): structured requests, then raw bytes.
STRUCTURED_EXAMPLES = 150
RAW_EXAMPLES = 50
MAX_STREAMED = 3

ECHO = echo_registry().models[0]
PROMPT = "a red fox"
VALID_INFER = pb.ModelInferRequest(
    model_name=ECHO.name,
    inputs=[pb.ModelInferRequest.InferInputTensor(name="prompt", datatype="BYTES", shape=[1])],
    raw_input_contents=[join_bytes_tensor([PROMPT.encode()])],
)
# A valid request of each kind, varied a few fields at a time.
BASES = {
    "mediamesh.v1.GenerateRequest": common_pb2.GenerateRequest(model=ECHO.name, prompt=PROMPT),
    "inference.ModelInferRequest": VALID_INFER,
}
DATATYPES = ("BYTES", "INT64", "FP32", "BOOL", "UINT8", "")


def _infer_regression(**parameters: pb.InferParameter) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest()
    request.CopyFrom(VALID_INFER)
    for name, value in parameters.items():
        request.parameters[name].CopyFrom(value)
    return request


# Requests that once made the gateway answer INTERNAL or UNKNOWN, kept as explicit examples.
REGRESSIONS: dict[str, list[bytes]] = {
    # A KServe timeout (microseconds) above the uint32 milliseconds of a job: INTERNAL before.
    "/inference.GRPCInferenceService/ModelInfer": [
        _infer_regression(timeout=pb.InferParameter(int64_param=2**63 - 1)).SerializeToString(),
    ],
}


def hints(job_ids: list[str]) -> Hints:
    """Values the gateway knows (the model, real job ids, tensor and parameter names), drawn
    alongside the generic ones so that requests also reach past the first lookup."""
    limit = ECHO.limits.max_prompt_chars
    prompts = st.sampled_from([PROMPT, "a" * limit, "a" * (limit + 1), "é" * limit])
    model = st.just(ECHO.name)
    jobs = st.sampled_from(job_ids)
    sizes = st.sampled_from([8, 16, 64, 72])
    small = st.integers(-1, 9)
    request, tensor = "mediamesh.v1.GenerateRequest", "inference.ModelInferRequest.InferInputTensor"
    element = st.sampled_from([PROMPT.encode(), b"", b"\xff\xfe", b"a\x00b"])
    return {
        (request, "model"): model,
        (request, "prompt"): prompts,
        (request, "steps"): small,
        (request, "width"): sizes,
        (request, "height"): sizes,
        (request, "timeout_ms"): st.sampled_from([1, 50, 60_000]),
        **{(f"mediamesh.v1.{kind}Request", "job_id"): jobs for kind in _JOB_REQUESTS},
        ("inference.ModelInferRequest", "model_name"): model,
        ("inference.ModelInferRequest", "model_version"): st.sampled_from(["", "1", "2"]),
        ("inference.ModelReadyRequest", "name"): model,
        ("inference.ModelMetadataRequest", "name"): model,
        ("inference.ModelInferRequest", "raw_input_contents"): st.one_of(
            st.lists(element, max_size=4).map(join_bytes_tensor),
            # A length prefix that claims more bytes than follow.
            st.just(b"\x09\x00\x00\x00abc"),
        ),
        (tensor, "name"): st.sampled_from(["prompt", "negative_prompt"]),
        (tensor, "datatype"): st.sampled_from(DATATYPES),
        (tensor, "shape"): small,
        ("inference.InferTensorContents", "bytes_contents"): element,
        ("inference.InferParameter", "int64_param"): small,
        ("inference.InferParameter", "string_param"): st.sampled_from(["REALTIME", "batch", ""]),
        **{
            (f"inference.ModelInferRequest{entry}.ParametersEntry", "key"): st.sampled_from(
                [*KNOWN_PARAMETERS, "triton_enable_empty_final_response"]
            )
            for entry in ("", ".InferInputTensor", ".InferRequestedOutputTensor")
        },
        ("inference.ModelInferRequest.InferRequestedOutputTensor", "name"): st.sampled_from(
            ["output", "seed"]
        ),
    }


# DeleteJob is left out: drawn from the known jobs it would delete them, and every method
# fuzzed after it would then reach no further than NOT_FOUND.
_JOB_REQUESTS = ("Watch", "Cancel", "GetJob", "Download")


def infer_requests(known: Hints) -> st.SearchStrategy[pb.ModelInferRequest]:
    """Prompt tensors whose declared shape, datatype and contents agree or not, with
    parameters of any kind under the names the gateway reads."""
    parameter = messages(pb.InferParameter.DESCRIPTOR, known)
    names = known[("inference.ModelInferRequest.ParametersEntry", "key")]
    return st.builds(
        _infer_request,
        prompts=st.lists(known[("inference.InferTensorContents", "bytes_contents")], max_size=4),
        shape=st.one_of(st.none(), st.lists(integers_of(-(2**63), 2**63 - 1), max_size=3)),
        datatype=st.sampled_from(DATATYPES),
        raw=st.booleans(),
        parameters=st.dictionaries(names, parameter, max_size=3),
    )


def _infer_request(
    prompts: list[bytes],
    shape: list[int] | None,
    datatype: str,
    raw: bool,
    parameters: dict[str, pb.InferParameter],
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=ECHO.name)
    tensor = request.inputs.add(
        name="prompt", datatype=datatype, shape=[len(prompts)] if shape is None else shape
    )
    if raw:
        request.raw_input_contents.append(join_bytes_tensor(prompts))
    else:
        tensor.contents.bytes_contents.extend(prompts)
    for name, value in parameters.items():
        request.parameters[name].CopyFrom(value)
    return request


def requests_for(method: object, known: Hints) -> st.SearchStrategy[bytes]:
    descriptor = method.input_type  # type: ignore[attr-defined]
    choices = [messages(descriptor, known)]
    if descriptor.full_name in BASES:
        choices.append(variations(BASES[descriptor.full_name], known))
    if descriptor.full_name == "inference.ModelInferRequest":
        choices.append(infer_requests(known))
    return st.one_of(choices).map(lambda m: m.SerializeToString())


# Mostly a valid key of either tenant, so most requests get past authentication.
METADATA = st.integers(0, 3).flatmap(
    lambda n: (
        st.sampled_from([auth(KEY_A), auth(KEY_B)])
        if n < 3
        else st.one_of(
            st.sampled_from(
                [
                    (),
                    auth("not-a-key"),
                    (("authorization", "Basic a2V5"),),
                    (("authorization", "Bearer"),),
                ]
            ),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(
                lambda value: (("authorization", value),)
            ),
        )
    )
)


def calls(
    method: object, requests: st.SearchStrategy[bytes], metadata: object
) -> st.SearchStrategy:
    streaming = method.client_streaming  # type: ignore[attr-defined]
    count = st.integers(0, MAX_STREAMED) if streaming else st.just(1)
    bodies = count.flatmap(lambda n: st.lists(requests, min_size=n, max_size=n))
    return st.builds(Call, st.just(method), bodies.map(tuple), metadata)  # type: ignore[arg-type]


def check_event(data: bytes) -> None:
    event = common_pb2.GenerateEvent.FromString(data)
    if event.HasField("error"):
        assert event.error.code not in {c.name for c in UNDELIBERATE}, event.error


def check_stream_response(data: bytes) -> None:
    response = pb.ModelStreamInferResponse.FromString(data)
    code = response.error_message.partition(":")[0]
    assert code not in {c.name for c in UNDELIBERATE}, response.error_message


def gateway_probe(channel: grpc.Channel) -> Probe:
    checks = {
        path_of(GATEWAY.methods_by_name["Generate"]): check_event,
        path_of(GATEWAY.methods_by_name["Watch"]): check_event,
        path_of(INFERENCE.methods_by_name["ModelStreamInfer"]): check_stream_response,
    }
    services = {GATEWAY.full_name: channel, INFERENCE.full_name: channel}
    return Probe(services, checks)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def known_jobs(fuzz_mesh: InProcessMesh) -> list[str]:
    """A finished job of each tenant, so Watch, GetJob, Cancel and Download find real ones."""
    stub = fuzz_mesh.gateway_stub()
    ids = []
    for key in (KEY_A, KEY_B):
        request = common_pb2.GenerateRequest(model=ECHO.name, prompt=PROMPT)
        events = [e async for e in stub.Generate(request, metadata=auth(key), timeout=60)]
        assert events[-1].HasField("result"), events[-1]
        ids.append(events[-1].job_id)
    return [*ids, "0" * 32]


async def assert_healthy(mesh: InProcessMesh) -> None:
    """The gateway still reports SERVING, and a plain Generate still ends in a result."""
    stub = mesh.gateway_stub()
    assert await answers_serving(mesh.channels[-1], 5)
    request = common_pb2.GenerateRequest(model=ECHO.name, prompt=PROMPT)
    events = [e async for e in stub.Generate(request, metadata=auth(KEY_A), timeout=60)]
    assert events[-1].HasField("result"), events[-1]


def _fuzz(probe: Probe, method: object, strategy: st.SearchStrategy, examples: int) -> None:
    def check(call: Call) -> None:
        probe.call(call)

    test = given(call=strategy)(check)
    for request in REGRESSIONS.get(path_of(method), []):  # type: ignore[arg-type]
        test = example(call=Call(method, (request,), auth(KEY_A)))(test)  # type: ignore[arg-type]
    fuzz_settings(examples)(test)()


@pytest.mark.parametrize("method", METHODS, ids=IDS)
async def test_structured_requests_get_a_deliberate_answer(fuzz_mesh, known_jobs, method):
    strategy = calls(method, requests_for(method, hints(known_jobs)), METADATA)
    with blocking_channel(f"127.0.0.1:{fuzz_mesh.gateway.port}") as channel:
        probe = gateway_probe(channel)
        await asyncio.to_thread(_fuzz, probe, method, strategy, STRUCTURED_EXAMPLES)
    await assert_healthy(fuzz_mesh)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
async def test_bytes_that_are_no_request_get_a_deliberate_answer(fuzz_mesh, known_jobs, method):
    raw = raw_requests(method.input_type, hints(known_jobs))
    strategy = calls(method, raw, st.just(auth(KEY_A)))
    with blocking_channel(f"127.0.0.1:{fuzz_mesh.gateway.port}") as channel:
        probe = gateway_probe(channel)
        await asyncio.to_thread(_fuzz, probe, method, strategy, RAW_EXAMPLES)
    await assert_healthy(fuzz_mesh)
