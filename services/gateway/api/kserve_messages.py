"""Open Inference Protocol messages <-> the plain values of mediamesh.gateway.core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.protobuf import json_format

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway.core import inference_call
from mediamesh.gateway.core.inference_call import (
    MODEL_VERSION,
    InputTensor,
    OutputTensor,
    ParamValue,
    RequestedOutput,
)
from mediamesh.gateway.core.model_config import model_config

FINAL_FLAG = "triton_final_response"
# Typed content fields that cannot carry BYTES elements.
_NON_BYTES_CONTENTS = tuple(
    f.name for f in pb.InferTensorContents.DESCRIPTOR.fields if f.name != "bytes_contents"
)


def parameter_values(parameters: Mapping[str, pb.InferParameter]) -> dict[str, ParamValue]:
    """The plain values of request parameters; INVALID_ARGUMENT for a parameter without a value."""
    values: dict[str, ParamValue] = {}
    for name, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if kind is None:
            raise InvalidArgument(f"parameters: '{name}' has no value")
        values[name] = getattr(parameter, kind)
    return values


def parameter_message(value: ParamValue) -> pb.InferParameter:
    """The InferParameter holding `value` (bool, int64, double or string, by its Python type)."""
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        return pb.InferParameter(int64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    return pb.InferParameter(string_param=value)


def input_tensors(request: pb.ModelInferRequest) -> list[InputTensor]:
    """The request's input tensors with their contents, raw or typed.

    INVALID_ARGUMENT when raw_input_contents is used but not one entry per input.
    """
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise InvalidArgument(
            f"raw_input_contents: {len(raw)} entries for {len(request.inputs)} inputs; "
            "send one entry per input, in the order of inputs"
        )
    tensors = []
    for index, tensor in enumerate(request.inputs):
        contents = tensor.contents
        tensors.append(
            InputTensor(
                name=tensor.name,
                datatype=tensor.datatype,
                shape=tuple(tensor.shape),
                elements=tuple(contents.bytes_contents),
                raw=raw[index] if raw else None,
                other_contents=any(len(getattr(contents, f)) for f in _NON_BYTES_CONTENTS),
                parameter_names=tuple(tensor.parameters),
            )
        )
    return tensors


def requested_outputs(request: pb.ModelInferRequest) -> list[RequestedOutput]:
    """The outputs the request asks for, with their parameters' names; empty means all."""
    return [RequestedOutput(output.name, tuple(output.parameters)) for output in request.outputs]


def infer_response(
    request: pb.ModelInferRequest,
    outputs: Sequence[OutputTensor] = (),
    parameters: Mapping[str, ParamValue] | None = None,
) -> pb.ModelInferResponse:
    """The ModelInferResponse to `request` carrying `outputs` (as raw contents) and `parameters`."""
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version=MODEL_VERSION, id=request.id
    )
    for name, value in (parameters or {}).items():
        response.parameters[name].CopyFrom(parameter_message(value))
    for tensor in outputs:
        message = response.outputs.add(
            name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape)
        )
        for name, value in tensor.parameters.items():
            message.parameters[name].CopyFrom(parameter_message(value))
        response.raw_output_contents.append(tensor.raw)
    return response


def stream_response(
    request: pb.ModelInferRequest,
    outputs: Sequence[OutputTensor] = (),
    parameters: Mapping[str, ParamValue] | None = None,
) -> pb.ModelStreamInferResponse:
    """`infer_response` wrapped for ModelStreamInfer."""
    return pb.ModelStreamInferResponse(infer_response=infer_response(request, outputs, parameters))


def stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    """A ModelStreamInfer error response naming the request (model and id) it answers."""
    # The response part names the request the error belongs to on a shared stream.
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(model_name=request.model_name, id=request.id),
    )


def model_metadata(spec: ModelSpec) -> pb.ModelMetadataResponse:
    """The ModelMetadataResponse describing `spec` (see `inference_call.model_metadata`)."""
    return json_format.ParseDict(inference_call.model_metadata(spec), pb.ModelMetadataResponse())


def model_config_message(spec: ModelSpec) -> pb.ModelConfig:
    """`spec`'s configuration as the ModelConfig message (the same fields as over HTTP)."""
    return json_format.ParseDict(model_config(spec), pb.ModelConfig())
