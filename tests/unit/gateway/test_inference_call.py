"""Open Inference Protocol requests as jobs: tensors, parameters, limits, outputs."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument, MeshError, NotFound
from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.inference_call import (
    OUTPUTS,
    ElementResult,
    InputTensor,
    RequestedOutput,
    check_version,
    encode_outputs,
    job_failure,
    model_inputs,
    parse_call,
    parse_priority_parameter,
)
from mediamesh.gateway.core.tensors import (
    join_bytes_tensor,
    pack_int64,
    split_bytes_tensor,
    unpack_int64,
)

REGISTRY = load_registry()
FLUX = REGISTRY.get("flux-tiny")
AUDIO = REGISTRY.get("stable-audio-tiny")


def prompts(*texts: str, raw: bool = False, shape: tuple[int, ...] | None = None) -> InputTensor:
    elements = tuple(t.encode() for t in texts)
    shape = shape or (len(texts),)
    if raw:
        return InputTensor("prompt", "BYTES", shape, raw=join_bytes_tensor(elements))
    return InputTensor("prompt", "BYTES", shape, elements=elements)


def test_bytes_tensor_round_trip_including_empty_and_binary_elements():
    elements = [b"", b"a red fox", bytes(range(256)), "é".encode()]
    raw = join_bytes_tensor(elements)
    assert raw[:4] == b"\x00\x00\x00\x00" and raw[4:8] == (9).to_bytes(4, "little")
    assert split_bytes_tensor(raw, "prompt") == elements
    assert split_bytes_tensor(b"", "prompt") == []


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"\x05\x00\x00\x00abc", "declares 5 bytes but only 3 remain"), (b"\x01\x00", "4-byte")],
)
def test_malformed_raw_bytes_name_the_tensor_and_the_problem(raw, words):
    with pytest.raises(InvalidArgument) as caught:
        split_bytes_tensor(raw, "prompt")
    assert "prompt" in caught.value.message and words in caught.value.message


def test_int64_tensors_are_little_endian():
    raw = pack_int64([1, -2, 2**62])
    assert raw[:8] == (1).to_bytes(8, "little")
    assert unpack_int64(raw) == [1, -2, 2**62]


def test_each_element_becomes_a_job_with_seed_plus_index():
    call = parse_call(
        FLUX,
        [prompts("a", "b", "c", raw=True)],
        {"seed": 10, "steps": 3, "width": 32, "guidance_scale": 2},
        [],
    )
    assert [e.prompt for e in call.elements] == ["a", "b", "c"]
    assert [e.seed for e in call.elements] == [10, 11, 12]
    assert all(e.steps == 3 and e.width == 32 and e.guidance_scale == 2.0 for e in call.elements)
    assert call.outputs == ("output", "seed")


def test_typed_and_raw_contents_give_the_same_call():
    typed = parse_call(FLUX, [prompts("x", "y")], {}, [RequestedOutput("output")])
    raw = parse_call(FLUX, [prompts("x", "y", raw=True)], {}, [RequestedOutput("output")])
    assert [e.prompt for e in typed.elements] == [e.prompt for e in raw.elements]
    assert typed.outputs == ("output",)


def test_shape_n_by_1_is_accepted_and_answered_in_the_same_shape():
    call = parse_call(FLUX, [prompts("x", "y", shape=(2, 1))], {}, [])
    assert len(call.elements) == 2 and call.element_dims == (1,)
    results = [ElementResult(b"a", "image/png", 5), ElementResult(b"b", "image/png", 6)]
    output, seed = encode_outputs(results, call.outputs, call.element_dims)
    assert output.shape == seed.shape == (2, 1)
    assert parse_call(FLUX, [prompts("x", "y")], {}, []).element_dims == ()


def test_one_negative_prompt_applies_to_every_element():
    negative = InputTensor("negative_prompt", "BYTES", (1,), elements=(b"blurry",))
    call = parse_call(AUDIO, [prompts("a", "b"), negative], {}, [])
    assert [e.negative_prompt for e in call.elements] == ["blurry", "blurry"]


def test_metadata_lists_a_negative_prompt_only_for_models_that_use_one():
    assert [t.name for t in model_inputs(FLUX)] == ["prompt"]
    assert [t.name for t in model_inputs(AUDIO)] == ["prompt", "negative_prompt"]
    with pytest.raises(InvalidArgument) as caught:
        parse_call(FLUX, [prompts("a"), InputTensor("style", "BYTES", (1,), (b"x",))], {}, [])
    assert caught.value.message.endswith("inputs are prompt")


def test_a_model_that_takes_no_negative_prompt_refuses_one_naming_it():
    negative = InputTensor("negative_prompt", "BYTES", (1,), elements=(b"blurry",))
    with pytest.raises(InvalidArgument) as caught:
        parse_call(FLUX, [prompts("a"), negative], {}, [])
    assert caught.value.message.startswith("negative_prompt: model 'flux-tiny'")
    # Empty elements are no negative prompt.
    empty = InputTensor("negative_prompt", "BYTES", (1,), elements=(b"",))
    assert parse_call(FLUX, [prompts("a"), empty], {}, []).elements[0].negative_prompt == ""


def test_a_timeout_past_what_a_job_can_hold_is_invalid_argument_naming_the_limit():
    biggest = (2**32 - 1) * 1000
    assert parse_call(FLUX, [prompts("x")], {"timeout": biggest}, []).elements[0].timeout_ms == (
        2**32 - 1
    )
    for micros in (biggest + 1, 4_300_000_000_000, 2**63 - 1):
        with pytest.raises(InvalidArgument) as caught:
            parse_call(FLUX, [prompts("x")], {"timeout": micros}, [])
        assert caught.value.message.startswith(f"timeout: {micros} microseconds is above")
        assert str(biggest) in caught.value.message


def test_priority_names_and_schedule_policy_levels():
    assert parse_priority_parameter("BATCH") == "BATCH"
    for spelt in ("batch", " BATCH"):  # refused, as on the native and OpenAI faces
        with pytest.raises(InvalidArgument, match=r"^priority: unknown value"):
            parse_priority_parameter(spelt)
    assert parse_priority_parameter(1) == "REALTIME"
    assert parse_priority_parameter(3) == "BATCH"
    assert parse_priority_parameter(0) == "STANDARD"


def test_timeout_microseconds_become_milliseconds_rounded_up():
    call = parse_call(FLUX, [prompts("x")], {"timeout": 1500}, [])
    assert call.elements[0].timeout_ms == 2
    assert parse_call(FLUX, [prompts("x")], {"timeout": 0}, []).elements[0].timeout_ms is None


def test_client_protocol_parameters_are_ignored():
    call = parse_call(FLUX, [prompts("x")], {"triton_enable_empty_final_response": True}, [])
    assert len(call.elements) == 1


@pytest.mark.parametrize(
    ("spec", "inputs", "parameters", "outputs", "words"),
    [
        (FLUX, [], {}, [], "'prompt' is required"),
        (FLUX, [prompts("x"), prompts("y")], {}, [], "sent more than once"),
        (FLUX, [prompts(*"abcde")], {}, [], "5 elements; the limit for model 'flux-tiny' is 4"),
        (FLUX, [InputTensor("image", "BYTES", (1,))], {}, [], "unexpected inference input"),
        (FLUX, [InputTensor("prompt", "FP32", (1,))], {}, [], "datatype must be BYTES"),
        (FLUX, [prompts("x", shape=(1, 1, 1))], {}, [], "shape must be [N] or [N, 1]"),
        (FLUX, [prompts("x", shape=(2,))], {}, [], "needs 2 elements, got 1"),
        (FLUX, [prompts(shape=(0,))], {}, [], "has no elements"),
        (
            FLUX,
            [InputTensor("prompt", "BYTES", (1,), (b"x",), raw=join_bytes_tensor([b"x"]))],
            {},
            [],
            "not both",
        ),
        (
            FLUX,
            [InputTensor("prompt", "BYTES", (1,), other_contents=True)],
            {},
            [],
            "bytes_contents",
        ),
        (
            FLUX,
            [InputTensor("prompt", "BYTES", (1,), (b"\xff\xfe",))],
            {},
            [],
            "prompt[0]: not valid UTF-8",
        ),
        (
            FLUX,
            [prompts("a", "b", "c"), InputTensor("negative_prompt", "BYTES", (2,), (b"", b""))],
            {},
            [],
            "negative_prompt: 2 elements; send 1, or one per prompt element (3)",
        ),
        (FLUX, [prompts("")], {}, [], "prompt: must not be empty"),
        (FLUX, [prompts("x" * 2001)], {}, [], "limit is 2000"),
        (FLUX, [prompts("x")], {"steps": 51}, [], "steps: 51 is out of range; allowed 1..50"),
        (FLUX, [prompts("x")], {"steps": 1.5}, [], "steps: expected an integer"),
        (FLUX, [prompts("x")], {"steps": True}, [], "steps: expected an integer"),
        (FLUX, [prompts("x")], {"width": 70}, [], "multiple of 16"),
        (FLUX, [prompts("x")], {"height": 1024}, [], "height: 1024 is out of range"),
        (FLUX, [prompts("x")], {"guidance_scale": "high"}, [], "guidance_scale: expected a number"),
        (FLUX, [prompts("x")], {"guidance_scale": 99.0}, [], "guidance_scale"),
        (FLUX, [prompts("x")], {"num_frames": 5}, [], "num_frames"),
        (AUDIO, [prompts("x")], {"duration_s": 60.0}, [], "duration_s"),
        (AUDIO, [prompts("x")], {"width": 64}, [], "width"),
        (FLUX, [prompts("x")], {"seed": -1}, [], "seed"),
        (FLUX, [prompts("x", "y")], {"seed": 2**63 - 1}, [], "(element 1)"),
        (FLUX, [prompts("x")], {"priority": "urgent"}, [], "priority: unknown value"),
        (FLUX, [prompts("x")], {"priority": 7}, [], "priority: 7 is out of range; allowed 1..3"),
        (FLUX, [prompts("x")], {"timeout": -5}, [], "timeout: -5 is negative"),
        (FLUX, [prompts("x")], {"stepz": 4}, [], "unknown parameter 'stepz'"),
        (FLUX, [prompts("x")], {}, [RequestedOutput("image")], "unexpected inference output"),
    ],
)
def test_every_bad_request_is_invalid_argument_naming_the_field(
    spec, inputs, parameters, outputs, words
):
    with pytest.raises(InvalidArgument) as caught:
        parse_call(spec, inputs, parameters, outputs)
    assert words in caught.value.message


def test_every_listed_output_can_be_requested_and_the_preview_is_not_listed():
    # flux-tiny offers previews, yet they are no output a request can name.
    assert FLUX.preview.enabled
    listed = [RequestedOutput(t.name) for t in OUTPUTS]
    assert parse_call(FLUX, [prompts("x")], {}, listed).outputs == ("output", "seed")
    with pytest.raises(InvalidArgument) as caught:
        parse_call(FLUX, [prompts("x")], {}, [RequestedOutput("preview")])
    assert "ModelStreamInfer's progress responses" in caught.value.message


def shared_memory_prompt() -> InputTensor:
    # What tritonclient's InferInput.set_shared_memory sends: parameters, and no contents.
    names = ("shared_memory_region", "shared_memory_byte_size")
    return InputTensor("prompt", "BYTES", (1,), parameter_names=names)


@pytest.mark.parametrize(
    ("inputs", "outputs", "words"),
    [
        (
            [shared_memory_prompt()],
            [],
            "inputs.prompt.parameters.shared_memory_byte_size: shared memory is not supported; "
            "inputs take no parameters",
        ),
        (
            [InputTensor("prompt", "BYTES", (1,), (b"x",), parameter_names=("foo",))],
            [],
            "inputs.prompt.parameters.foo: unknown parameter; inputs take no parameters",
        ),
        (
            [prompts("x")],
            [RequestedOutput("seed", ("classification",))],
            "outputs.seed.parameters.classification: classification is not supported; "
            "outputs take no parameters",
        ),
        (
            [prompts("x")],
            [RequestedOutput("output", ("shared_memory_region",))],
            "outputs.output.parameters.shared_memory_region: shared memory is not supported",
        ),
        (
            [prompts("x")],
            [RequestedOutput("output", ("binary_data",))],
            "outputs.output.parameters.binary_data: binary_data is an HTTP extension",
        ),
    ],
    ids=["shared-memory input", "input parameter", "classification", "output shm", "binary_data"],
)
def test_tensor_parameters_are_refused_naming_the_tensor_and_key(inputs, outputs, words):
    with pytest.raises(InvalidArgument) as caught:
        parse_call(FLUX, inputs, {}, outputs)
    assert words in caught.value.message


def test_unknown_version_is_not_found_like_triton():
    check_version(FLUX, "")
    check_version(FLUX, "1")
    with pytest.raises(NotFound) as caught:
        check_version(FLUX, "2")
    assert caught.value.message.startswith("Request for unknown model")


def test_outputs_in_triton_raw_layout_with_content_type():
    results = [ElementResult(b"png-a", "image/png", 5), ElementResult(b"png-bb", "image/png", 6)]
    output, seed = encode_outputs(results, ("output", "seed"))
    assert (output.name, output.datatype, output.shape) == ("output", "BYTES", (2,))
    assert output.parameters == {"content_type": "image/png"}
    assert split_bytes_tensor(output.raw, "output") == [b"png-a", b"png-bb"]
    assert (seed.datatype, unpack_int64(seed.raw)) == ("INT64", [5, 6])


def test_mixed_formats_list_each_elements_content_type():
    results = [ElementResult(b"a", "video/mp4", 1), ElementResult(b"b", "image/webp", 2)]
    (output,) = encode_outputs(results, ("output",))
    assert output.parameters["content_type"] == "video/mp4,image/webp"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("DEADLINE_EXCEEDED", "UNAVAILABLE"),
        ("CANCELLED", "CANCELLED"),
        ("INTERNAL", "INTERNAL"),
        ("NO_SUCH_CODE", "INTERNAL"),
    ],
)
def test_job_failures_map_to_triton_status_codes(code, expected):
    error = job_failure("j1", code, "why")
    assert isinstance(error, MeshError) and error.code == expected and "j1" in error.message
    if code == "DEADLINE_EXCEEDED":
        assert error.message.startswith("Request timeout expired")


def test_a_missing_input_image_is_asked_for_as_a_tensor_not_an_upload_id():
    """Upload ids are the native API's; on this protocol an `image_id` input is unknown."""
    img2img = load_registry().get("flux-img2img-tiny")
    with pytest.raises(InvalidArgument) as refused:
        parse_call(img2img, [prompts("a")], {}, [])
    message = str(refused.value)
    assert message.startswith("image: required by model 'flux-img2img-tiny'"), message
    assert "send it as the 'image' input" in message and "image_id" not in message
