"""The Open Inference Protocol's REST bodies: JSON and the binary tensor data extension, in
both directions, and the refusals that name what is wrong."""

from __future__ import annotations

import json

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.core.inference_call import OutputTensor
from mediamesh.gateway.core.oip_rest import (
    check_outputs_sendable,
    encode_infer_response,
    parse_infer_request,
)
from mediamesh.gateway.core.tensors import join_bytes_tensor, pack_int64, split_bytes_tensor
from tests.oip_bodies import raw_inputs_body


def body(document: dict, *raw: bytes) -> tuple[bytes, str | None]:
    head = json.dumps(document).encode()
    return head + b"".join(raw), (str(len(head)) if raw else None)


def refused(document_or_body, header=None) -> str:
    data, length = (
        body(document_or_body) if isinstance(document_or_body, dict) else (document_or_body, header)
    )
    with pytest.raises(InvalidArgument) as caught:
        parse_infer_request(data, length)
    return caught.value.message


def test_a_json_request_with_nested_strings():
    data, length = body(
        {
            "id": "r1",
            "parameters": {"steps": 2, "seed": 7, "guidance_scale": 1.5, "output_format": "png"},
            "inputs": [
                {"name": "prompt", "shape": [2, 1], "datatype": "BYTES", "data": [["a fox"], ["é"]]}
            ],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}, {"name": "seed"}],
        }
    )
    request = parse_infer_request(data, length)
    (prompt,) = request.inputs
    assert (prompt.name, prompt.shape, prompt.elements) == (
        "prompt",
        (2, 1),
        (b"a fox", "é".encode()),
    )
    assert request.parameters == {
        "steps": 2,
        "seed": 7,
        "guidance_scale": 1.5,
        "output_format": "png",
    }
    assert [o.name for o in request.outputs] == ["output", "seed"]
    assert request.binary("output") and not request.binary("seed") and request.id == "r1"


def test_binary_inputs_follow_the_json_in_their_order():
    prompts = join_bytes_tensor([b"one", b"two"])
    image = join_bytes_tensor([b"\x89PNG..."])
    data, length = raw_inputs_body(
        {"parameters": {"binary_data_output": True}},
        prompt=[b"one", b"two"],
        image=[b"\x89PNG..."],
    )
    request = parse_infer_request(data, length)
    assert [t.raw for t in request.inputs] == [prompts, image]
    assert request.inputs[0].parameter_names == ()  # the extension's own parameter is taken
    assert request.all_binary and request.binary("seed") and request.parameters == {}


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"inputs": []}, "inputs: expected a list of at least one"),
        (
            {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES"}]},
            "inputs.prompt.data: required",
        ),
        (
            {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": [1]}]},
            "inputs.prompt.data[0]: a BYTES element is a string",
        ),
        (
            {"inputs": [{"name": "prompt", "shape": [-1], "datatype": "BYTES", "data": ["a"]}]},
            "inputs.prompt.shape",
        ),
        (
            {
                "inputs": [
                    {
                        "name": "prompt",
                        "shape": [1],
                        "datatype": "BYTES",
                        "data": ["a"],
                        "contents": {},
                    }
                ]
            },
            "inputs.prompt.contents: not a field",
        ),
        (
            {
                "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                "model": "x",
            },
            "model: not a field",
        ),
        (
            {
                "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                "parameters": {"steps": [1]},
            },
            "parameters.steps: expected a string, number or boolean",
        ),
        (
            {
                "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                "parameters": {"binary_data_output": 1},
            },
            "parameters.binary_data_output: expected true or false",
        ),
        (
            {
                "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                "outputs": {"name": "x"},
            },
            "outputs: expected a list",
        ),
        (
            {
                "inputs": [
                    {
                        "name": "prompt",
                        "shape": [1],
                        "datatype": "BYTES",
                        "parameters": {"binary_data_size": 4},
                    }
                ]
            },
            "binary_data_size: 4 is not a byte count within the 0 raw bytes",
        ),
    ],
)
def test_refusals_name_the_field(document, words):
    assert words in refused(document)


def test_the_header_length_and_the_binary_sizes_must_add_up():
    data, length = body(
        {
            "inputs": [
                {
                    "name": "prompt",
                    "shape": [1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": 3},
                }
            ]
        },
        b"abcd",
    )
    assert "4 bytes after its JSON object" in refused(data, length)
    assert "Inference-Header-Content-Length: 'x'" in refused(data, "x")
    assert "Inference-Header-Content-Length" in refused(data, str(len(data) + 1))
    assert "the request body: not valid JSON" in refused(b"[1, 2", None)


def test_the_media_output_goes_raw_or_is_refused_before_any_job():
    data, length = body(
        {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}
    )
    request = parse_infer_request(data, length)
    check_outputs_sendable(request, ["seed"])
    with pytest.raises(InvalidArgument) as caught:
        check_outputs_sendable(request, ["output", "seed"])
    assert caught.value.message.startswith("outputs.output: it holds encoded media")


def test_a_response_with_a_raw_output_and_a_json_one():
    data, length = body(
        {
            "id": "r9",
            "inputs": [{"name": "prompt", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}, {"name": "seed"}],
        }
    )
    request = parse_infer_request(data, length)
    media = join_bytes_tensor([b"png-a", b"png-bb"])
    outputs = [
        OutputTensor("output", "BYTES", (2,), {"content_type": "image/png"}, media),
        OutputTensor("seed", "INT64", (2,), {}, pack_int64([5, 6])),
    ]
    content, json_length = encode_infer_response("flux-tiny", request, outputs)
    assert json_length is not None
    head = json.loads(content[:json_length])
    assert head == {
        "model_name": "flux-tiny",
        "model_version": "1",
        "id": "r9",
        "outputs": [
            {
                "name": "output",
                "datatype": "BYTES",
                "shape": [2],
                "parameters": {"content_type": "image/png", "binary_data_size": len(media)},
            },
            {"name": "seed", "datatype": "INT64", "shape": [2], "data": [5, 6]},
        ],
    }
    assert split_bytes_tensor(content[json_length:], "output") == [b"png-a", b"png-bb"]
    only_seed, none = encode_infer_response("flux-tiny", request, outputs[1:])
    assert none is None and json.loads(only_seed)["outputs"][0]["data"] == [5, 6]


def test_an_outputs_own_binary_data_overrides_the_requests_either_way():
    prompt = {"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a"]}
    everything_raw = {
        "inputs": [prompt],
        "outputs": [{"name": "output", "parameters": {"binary_data": False}}, {"name": "seed"}],
        "parameters": {"binary_data_output": True},
    }
    request = parse_infer_request(*body(everything_raw))
    assert not request.binary("output") and request.binary("seed")
    # So the media output, which JSON cannot carry, is refused rather than sent raw.
    with pytest.raises(InvalidArgument, match=r"^outputs\.output: it holds encoded media"):
        check_outputs_sendable(request, ["output", "seed"])
    only_seed_json = {
        "inputs": [prompt],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}, {"name": "seed"}],
    }
    request = parse_infer_request(*body(only_seed_json))
    assert request.binary("output") and not request.binary("seed")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"inputs": [], "parameters": {"x": ' + b"[" * 2000 + b"]" * 2000 + b"}}",
            "the request body: JSON nested more than 64 levels deep",
        ),
        (
            b'{"inputs": [], "parameters": {"seed": 1, "seed": 2}}',
            "seed: given twice in one JSON object; give it once",
        ),
        (
            b'{"inputs": [], "parameters": {"seed": ' + b"9" * 5000 + b"}}",
            "the request body: a number of more than 4300 digits",
        ),
    ],
)
def test_json_the_parser_alone_would_fail_on_is_refused(data: bytes, message: str):
    assert refused(data, None) == message
