"""The Open Inference Protocol over HTTP/REST (KServe v2, Triton): request and response
bodies, as JSON and with the binary tensor data extension, to and from the
transport-neutral tensors of inference_call.py. Pure: no HTTP framework, no protobuf.

With the extension, a body is a JSON object followed by the raw bytes of the tensors that
say so (`parameters.binary_data_size`), in their order; the `Inference-Header-Content-Length`
header gives the JSON object's length. BYTES elements are raw as in the gRPC protocol: each
a 4-byte little-endian length and its bytes. An output is sent raw when the request asks
for it (`binary_data` on the output, or `binary_data_output` on the request). The media
output (`output`, BYTES) has no JSON form, since JSON strings cannot hold arbitrary bytes: a
request that would receive it as JSON is refused before any job runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.core.inference_call import (
    MODEL_VERSION,
    OUTPUTS,
    InputTensor,
    OutputTensor,
    ParamValue,
    RequestedOutput,
)
from mediamesh.gateway.core.json_kinds import json_kind
from mediamesh.gateway.core.strict_json import parse_json
from mediamesh.gateway.core.tensors import unpack_int64

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA = "binary_data"
BINARY_DATA_OUTPUT = "binary_data_output"
_REQUEST_KEYS = frozenset({"id", "parameters", "inputs", "outputs"})
_INPUT_KEYS = frozenset({"name", "shape", "datatype", "parameters", "data"})
_OUTPUT_KEYS = frozenset({"name", "parameters"})
# Outputs whose elements are arbitrary bytes, which only the binary extension carries.
_RAW_ONLY = frozenset(t.name for t in OUTPUTS if t.datatype == "BYTES")


@dataclass(frozen=True)
class RestInferRequest:
    """An inference request as its body gave it."""

    id: str
    inputs: tuple[InputTensor, ...]
    # Request parameters, less the extension's own.
    parameters: dict[str, ParamValue]
    outputs: tuple[RequestedOutput, ...]
    # Each requested output's own `binary_data`, where it set one: it overrides the
    # request's `binary_data_output` for that output, either way.
    binary_by_output: Mapping[str, bool]
    all_binary: bool

    def binary(self, output: str) -> bool:
        """Whether `output` goes raw after the JSON object."""
        return self.binary_by_output.get(output, self.all_binary)


def parse_infer_request(body: bytes, header_length: str | None) -> RestInferRequest:
    """The request in `body`; InvalidArgument naming the field, parameter or header at fault."""
    json_length = _json_length(header_length, len(body))
    document = parse_json(body[:json_length], "the request body")
    request = _object(document, "the request body")
    _refuse_unknown(request, _REQUEST_KEYS, "")
    request_id = request.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument(f"id: expected a string, got {json_kind(request_id)}")
    parameters = _parameters(request.get("parameters", {}), "parameters")
    all_binary = _flag(
        parameters.pop(BINARY_DATA_OUTPUT, False), f"parameters.{BINARY_DATA_OUTPUT}"
    )
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidArgument("inputs: expected a list of at least one input tensor")
    raw = memoryview(body)[json_length:]
    tensors, used = [], 0
    for index, item in enumerate(inputs):
        tensor, size = _input(item, index, raw[used:])
        tensors.append(tensor)
        used += size
    if used != len(raw):
        raise InvalidArgument(
            f"the body has {len(raw)} bytes after its JSON object, and the inputs' "
            f"parameters.{BINARY_DATA_SIZE} add up to {used}"
        )
    outputs, binary = _outputs(request.get("outputs", []))
    return RestInferRequest(request_id, tuple(tensors), parameters, outputs, binary, all_binary)


def parse_index_request(body: bytes) -> bool:
    """Whether a repository index request (`{"ready": true}`, or an empty body) asks for
    the ready models only; InvalidArgument naming the field at fault."""
    if not body.strip():
        return False
    document = parse_json(body, "the request body")
    request = _object(document, "the request body")
    _refuse_unknown(request, frozenset({"ready"}), "")
    return _flag(request.get("ready", False), "ready")


def check_outputs_sendable(request: RestInferRequest, outputs: Iterable[str]) -> None:
    """InvalidArgument unless each of `outputs` (those the call will answer with) can be
    sent as the request asks: the media output only raw."""
    for name in outputs:
        if name in _RAW_ONLY and not request.binary(name):
            raise InvalidArgument(
                f"outputs.{name}: it holds encoded media (BYTES), which JSON cannot carry; "
                f"ask for it raw with parameters.{BINARY_DATA}: true on the output, or "
                f"{BINARY_DATA_OUTPUT}: true on the request (the binary tensor data extension, "
                "which tritonclient.http uses by default)"
            )


def encode_infer_response(
    model: str, request: RestInferRequest, outputs: Sequence[OutputTensor]
) -> tuple[bytes, int | None]:
    """The response body, and the length of its JSON object when raw tensors follow it
    (the `Inference-Header-Content-Length` header; None for a JSON-only body)."""
    views: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in outputs:
        view: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        parameters: dict[str, ParamValue] = dict(tensor.parameters)
        if request.binary(tensor.name):
            parameters[BINARY_DATA_SIZE] = len(tensor.raw)
            blobs.append(tensor.raw)
        else:
            view["data"] = _json_data(tensor)
        if parameters:
            view["parameters"] = parameters
        views.append(view)
    document: dict[str, Any] = {"model_name": model, "model_version": MODEL_VERSION}
    if request.id:
        document["id"] = request.id
    document["outputs"] = views
    head = json.dumps(document, separators=(",", ":")).encode()
    if not blobs:
        return head, None
    return head + b"".join(blobs), len(head)


# ---- parsing helpers -----------------------------------------------------------------------


def _json_length(header: str | None, body_length: int) -> int:
    if header is None:
        return body_length
    try:
        length = int(header.strip())
    except ValueError:
        length = -1
    if not 0 < length <= body_length:
        raise InvalidArgument(
            f"{HEADER_LENGTH}: {header!r} is not the length of the body's JSON object "
            f"(a whole number from 1 to the body's {body_length} bytes)"
        )
    return length


def _input(item: object, index: int, raw: memoryview) -> tuple[InputTensor, int]:
    """The input tensor `item` (the `index`th), and how many of the `raw` bytes it took."""
    tensor = _object(item, f"inputs[{index}]")
    name = tensor.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"inputs[{index}].name: expected a tensor name")
    where = f"inputs.{name}"
    _refuse_unknown(tensor, _INPUT_KEYS, where)
    datatype = tensor.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidArgument(f"{where}.datatype: expected a string, got {json_kind(datatype)}")
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidArgument(f"{where}.shape: expected a list of whole numbers >= 0")
    parameters = _parameters(tensor.get("parameters", {}), f"{where}.parameters")
    size = parameters.pop(BINARY_DATA_SIZE, None)
    # Any other parameter is refused by name when the call is checked (inference_call.py).
    names = tuple(parameters)
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= len(raw):
            raise InvalidArgument(
                f"{where}.parameters.{BINARY_DATA_SIZE}: {size!r} is not a byte count within "
                f"the {len(raw)} raw bytes left in the body"
            )
        if "data" in tensor:
            raise InvalidArgument(f"{where}: send data or {BINARY_DATA_SIZE}, not both")
        return InputTensor(
            name, datatype, tuple(shape), raw=bytes(raw[:size]), parameter_names=names
        ), size
    if "data" not in tensor:
        raise InvalidArgument(f"{where}.data: required (or parameters.{BINARY_DATA_SIZE})")
    elements = list(_flattened(tensor["data"]))
    if datatype != "BYTES":
        # Refused by datatype when the call is checked, before its contents are.
        return InputTensor(
            name, datatype, tuple(shape), other_contents=True, parameter_names=names
        ), 0
    encoded = []
    for position, element in enumerate(elements):
        if not isinstance(element, str):
            raise InvalidArgument(
                f"{where}.data[{position}]: a BYTES element is a string in JSON, got "
                f"{json_kind(element)}"
            )
        encoded.append(element.encode())
    return InputTensor(
        name, datatype, tuple(shape), elements=tuple(encoded), parameter_names=names
    ), 0


def _outputs(items: object) -> tuple[tuple[RequestedOutput, ...], dict[str, bool]]:
    if not isinstance(items, list):
        raise InvalidArgument(f"outputs: expected a list, got {json_kind(items)}")
    requested: list[RequestedOutput] = []
    binary: dict[str, bool] = {}
    for index, item in enumerate(items):
        output = _object(item, f"outputs[{index}]")
        name = output.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"outputs[{index}].name: expected a tensor name")
        _refuse_unknown(output, _OUTPUT_KEYS, f"outputs.{name}")
        parameters = _parameters(output.get("parameters", {}), f"outputs.{name}.parameters")
        if BINARY_DATA in parameters:
            where = f"outputs.{name}.parameters.{BINARY_DATA}"
            binary[name] = _flag(parameters.pop(BINARY_DATA), where)
        requested.append(RequestedOutput(name, tuple(parameters)))
    return tuple(requested), binary


def _parameters(value: object, where: str) -> dict[str, ParamValue]:
    parameters = _object(value, where)
    for key, item in parameters.items():
        if isinstance(item, float) and not math.isfinite(item):
            # Python's parser takes NaN and Infinity, which JSON has no words for.
            raise InvalidArgument(
                f"{where}.{key}: {json.dumps(item)} is not a finite number; expected a string, a "
                "finite number or a boolean"
            )
        if not isinstance(item, bool | int | float | str):
            raise InvalidArgument(
                f"{where}.{key}: expected a string, number or boolean, got {json_kind(item)}"
            )
    return dict(parameters)


def _flag(value: ParamValue, where: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{where}: expected true or false, got {json_kind(value)}")
    return value


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: expected a JSON object, got {json_kind(value)}")
    return value


def _refuse_unknown(value: Mapping[str, object], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        field = f"{where}.{unknown[0]}" if where else unknown[0]
        raise InvalidArgument(
            f"{field}: not a field of the protocol; known: {', '.join(sorted(known))}"
        )


def _flattened(data: object) -> Iterable[object]:
    """Row-major elements of nested lists (the protocol takes data flat or nested)."""
    if isinstance(data, list):
        for item in data:
            yield from _flattened(item)
    else:
        yield data


def _json_data(tensor: OutputTensor) -> list[int]:
    if tensor.datatype == "INT64":
        return unpack_int64(tensor.raw)
    raise InvalidArgument(f"outputs.{tensor.name}: {tensor.datatype} is sent raw only")
