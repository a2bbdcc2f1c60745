"""Tensor-level requests on the Open Inference Protocol: every output the metadata lists can
be asked for, and a parameter on an input or a requested output is refused, never ignored."""

from __future__ import annotations

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.gateway.core.tensors import unpack_int64
from tests.service.gateway.conftest import KEY_A, auth, run_probe
from tests.service.gateway.test_kserve import prompt_request, stub_for


async def test_tritonclient_asks_for_every_listed_output_and_tensor_parameters_are_refused(
    keyed_mesh,
):
    report = await run_probe(
        f"127.0.0.1:{keyed_mesh.gateway.port}", "tensor_parameters", "--api-key", KEY_A
    )
    seen = report["tensor_parameters"]
    assert seen["listed"] == seen["answered"] == ["output", "seed"]
    refused = seen["refused"]
    assert all(
        r is not None and r["status"] == "StatusCode.INVALID_ARGUMENT" for r in refused.values()
    )
    assert refused["classification"]["message"].startswith(
        "outputs.seed.parameters.classification: classification is not supported"
    )
    assert refused["shared_output"]["message"].startswith(
        "outputs.output.parameters.shared_memory_byte_size: shared memory is not supported"
    )
    # Not "needs 1 elements, got 0": a shared-memory input sends no contents.
    assert refused["shared_input"]["message"].startswith(
        "inputs.prompt.parameters.shared_memory_byte_size: shared memory is not supported"
    )
    assert refused["input_parameter"]["message"].startswith(
        "inputs.prompt.parameters.foo: unknown parameter; inputs take no parameters"
    )


async def test_model_infer_answers_every_output_model_metadata_lists(keyed_mesh):
    stub = stub_for(keyed_mesh)
    # flux-tiny offers previews: its metadata must still list only requestable outputs.
    metadata = await stub.ModelMetadata(
        pb.ModelMetadataRequest(name="flux-tiny"), metadata=auth(KEY_A)
    )
    request = prompt_request("flux-tiny", b"a fox", steps=1, seed=11)
    for output in metadata.outputs:
        request.outputs.add(name=output.name)
    response = await stub.ModelInfer(request, metadata=auth(KEY_A))
    assert [o.name for o in response.outputs] == [o.name for o in metadata.outputs]
    assert unpack_int64(response.raw_output_contents[1]) == [11]


def _with_tensor_parameters() -> list[tuple[str, pb.ModelInferRequest, str]]:
    cases = []
    tagged = prompt_request("echo", b"x")
    tagged.inputs[0].parameters["foo"].string_param = "bar"
    cases.append(("input parameter", tagged, "inputs.prompt.parameters.foo: unknown parameter"))
    shared = pb.ModelInferRequest(model_name="echo")
    shared_input = shared.inputs.add(name="prompt", datatype="BYTES", shape=[1])
    shared_input.parameters["shared_memory_region"].string_param = "i0"
    cases.append(
        (
            "shared-memory input",
            shared,
            "inputs.prompt.parameters.shared_memory_region: shared memory is not supported",
        )
    )
    classified = prompt_request("echo", b"x")
    classified.outputs.add(name="seed").parameters["classification"].int64_param = 3
    cases.append(
        (
            "classification",
            classified,
            "outputs.seed.parameters.classification: classification is not supported",
        )
    )
    shared_output = prompt_request("echo", b"x")
    shared_output.outputs.add(name="output").parameters["shared_memory_region"].string_param = "o0"
    cases.append(
        (
            "shared-memory output",
            shared_output,
            "outputs.output.parameters.shared_memory_region: shared memory is not supported",
        )
    )
    return cases


@pytest.mark.parametrize(
    ("case", "request_", "words"),
    _with_tensor_parameters(),
    ids=[case for case, _, _ in _with_tensor_parameters()],
)
async def test_tensor_parameters_are_invalid_argument_before_any_job(
    keyed_mesh, case, request_, words
):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub_for(keyed_mesh).ModelInfer(request_, metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in (caught.value.details() or "")
    assert not keyed_mesh.core.jobs
