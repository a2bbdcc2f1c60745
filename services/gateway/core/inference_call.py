"""An Open Inference Protocol request as mediamesh jobs, and their results as output tensors.

Pure: the api layer hands over tensors and parameters as plain values. Every registry model
takes input `prompt` (BYTES, one generation per element), those that use one an optional
`negative_prompt` (BYTES, one element or one per prompt), and answers with outputs `output`
(BYTES: each element's artifact) and `seed` (INT64: the seed each element used).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mediamesh.common.adapters import (
    DEFAULT_MAX_ADAPTERS_PER_REQUEST,
    parse_adapter_list,
    resolve_adapters,
)
from mediamesh.common.errors import InvalidArgument, MeshError, NotFound, StatusCode, field_of
from mediamesh.common.input_images import ID_FIELDS, how_to_send
from mediamesh.common.limits import INPUT_IMAGE, MAX_TIMEOUT_MS
from mediamesh.common.limits import PROMPT as PROMPT_LIMIT
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway.core.kserve_status import TIMEOUT_MESSAGE, kserve_code
from mediamesh.gateway.core.tensors import join_bytes_tensor, pack_int64, split_bytes_tensor

ParamValue = bool | int | float | str

PROMPT, NEGATIVE_PROMPT = "prompt", "negative_prompt"
OUTPUT, SEED = "output", "seed"
# Output of ModelStreamInfer's per-step responses: the step's latent preview (BYTES, one
# element, parameter mime_type), when the request set parameter preview_every_steps. Not in
# the model metadata: that lists what a request may ask for, and no request can ask for this.
PREVIEW = "preview"
MODEL_VERSION = "1"
# Parameters the client libraries add for their own protocol handling, never for the model.
CLIENT_PARAMETER_PREFIX = "triton_"
_INT_PARAMETERS = (
    "steps",
    "seed",
    "width",
    "height",
    "num_frames",
    "output_quality",
    "fps",
    "preview_every_steps",
)
_FLOAT_PARAMETERS = ("guidance_scale", "duration_s", "strength")
OUTPUT_FORMAT = "output_format"
# LoRA adapters as "name:scale,name:scale" (a name alone takes its default scale).
ADAPTERS = "adapters"
KNOWN_PARAMETERS = (
    *_INT_PARAMETERS,
    *_FLOAT_PARAMETERS,
    OUTPUT_FORMAT,
    "priority",
    "timeout",
    ADAPTERS,
)
# A job's timeout is whole milliseconds in a uint32; Triton's `timeout` is microseconds.
MAX_TIMEOUT_US = MAX_TIMEOUT_MS * 1000
# The field the scheduler's refusals for lack of time start with, and the KServe field the
# caller set instead.
NATIVE_TIMEOUT, KSERVE_TIMEOUT = "timeout_ms", "timeout"
# The schedule-policy extension numbers priority levels from 1, the highest.
_PRIORITY_LEVELS = ("REALTIME", "STANDARD", "BATCH")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as model metadata declares it; -1 in `shape` means any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]


PROMPT_INPUT = TensorSpec(PROMPT, "BYTES", (-1,))
NEGATIVE_PROMPT_INPUT = TensorSpec(NEGATIVE_PROMPT, "BYTES", (-1,))
OUTPUTS = (TensorSpec(OUTPUT, "BYTES", (-1,)), TensorSpec(SEED, "INT64", (-1,)))
# Input images (PNG, JPEG or WebP bytes), one element per prompt element, for the models
# whose registry entry lists them (`inputs`).
IMAGE_INPUTS = ("image", "mask_image")


def model_inputs(spec: ModelSpec) -> tuple[TensorSpec, ...]:
    """The inputs `spec` takes: the prompts (a negative one only where the model uses it),
    and the input images it lists."""
    prompts: tuple[TensorSpec, ...] = (PROMPT_INPUT,)
    if NEGATIVE_PROMPT in spec.accepted_fields:
        prompts += (NEGATIVE_PROMPT_INPUT,)
    images = tuple(TensorSpec(name, "BYTES", (-1,)) for name in IMAGE_INPUTS if name in spec.inputs)
    return prompts + images


def platform_of(spec: ModelSpec) -> str:
    """What runs the model, as its metadata and configuration name it."""
    return f"mediamesh_{spec.pipeline}"


def model_metadata(spec: ModelSpec) -> dict[str, object]:
    """`spec` as the protocol's model metadata describes a model (field for field, over gRPC
    and HTTP alike): its one version, its pipeline, and the tensors a request may send and
    ask for (ModelStreamInfer's `preview` is not one of those)."""

    def tensor(t: TensorSpec) -> dict[str, object]:
        return {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}

    return {
        "name": spec.name,
        "versions": [MODEL_VERSION],
        "platform": platform_of(spec),
        "inputs": [tensor(t) for t in model_inputs(spec)],
        "outputs": [tensor(t) for t in OUTPUTS],
    }


@dataclass(frozen=True)
class InputTensor:
    """One input as sent: typed `elements` (contents.bytes_contents) and/or `raw` bytes."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    elements: tuple[bytes, ...] = ()
    raw: bytes | None = None
    # True when the typed contents hold values of a non-BYTES kind.
    other_contents: bool = False
    parameter_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestedOutput:
    """One output a request asks for, with the names of the parameters it set on it."""

    name: str
    parameter_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class InferCall:
    """Validated jobs, one per prompt element, and the outputs to return."""

    model: str
    elements: tuple[RequestFields, ...]
    outputs: tuple[str, ...]
    # The prompt's dimensions after the first: () for [N], (1,) for [N, 1]. The outputs take
    # the same, so a client that batches as [N, 1] reads its answers in the shape it sent.
    element_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class ElementResult:
    """The finished job of one prompt element: its artifact, MIME type and the seed it used."""

    data: bytes
    mime_type: str
    seed: int


@dataclass(frozen=True)
class OutputTensor:
    """One output of a response: shape and parameters (e.g. content_type) plus its raw contents."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    parameters: Mapping[str, ParamValue]
    raw: bytes


def check_version(spec: ModelSpec, version: str) -> None:
    """NOT_FOUND unless `version` is empty or the one version every model has."""
    if version not in ("", MODEL_VERSION):
        raise NotFound(
            f"Request for unknown model: '{spec.name}' version {version} is not found; "
            f"the only version is {MODEL_VERSION}"
        )


def parse_call(
    spec: ModelSpec,
    inputs: Sequence[InputTensor],
    parameters: Mapping[str, ParamValue],
    requested_outputs: Sequence[RequestedOutput],
    max_adapters: int = DEFAULT_MAX_ADAPTERS_PER_REQUEST,
) -> InferCall:
    """Validates an inference request for `spec` and turns it into one job per prompt element.

    An explicit seed is incremented per element so elements differ. Raises InvalidArgument naming
    the input, parameter or element at fault.
    """
    by_name = _inputs_by_name(spec, inputs)
    if PROMPT not in by_name:
        raise InvalidArgument(
            f"inputs: '{PROMPT}' is required for model '{spec.name}' (BYTES, shape [-1])"
        )
    prompts = _texts(by_name[PROMPT])
    limit = spec.batching.max_batch
    if len(prompts) > limit:
        raise InvalidArgument(
            f"{PROMPT}: {len(prompts)} elements; the limit for model '{spec.name}' is {limit} "
            "(its max batch)"
        )
    images = {name: _images(by_name.get(name), len(prompts)) for name in IMAGE_INPUTS}
    negatives = [""] * len(prompts)
    if NEGATIVE_PROMPT in by_name:
        sent = _texts(by_name[NEGATIVE_PROMPT])
        if len(sent) not in (1, len(prompts)):
            raise InvalidArgument(
                f"{NEGATIVE_PROMPT}: {len(sent)} elements; send 1, or one per {PROMPT} "
                f"element ({len(prompts)})"
            )
        negatives = sent * len(prompts) if len(sent) == 1 else sent
    base = _fields_from_parameters(spec.name, parameters)
    # Before the per-element checks, which report everything as INVALID_ARGUMENT: an
    # adapter the model does not offer is NOT_FOUND, as on every other face.
    resolve_adapters(spec.name, spec.adapters, base.adapters, max_adapters)
    elements = []
    for index, (prompt, negative) in enumerate(zip(prompts, negatives, strict=True)):
        seed = None if base.seed is None else base.seed + index
        fields = replace(
            base,
            prompt=prompt,
            negative_prompt=negative,
            seed=seed,
            image=images["image"][index],
            mask_image=images["mask_image"][index],
        )
        try:
            resolve(spec, fields, max_adapters=max_adapters)
        except MeshError as exc:
            where = f" (element {index})" if len(prompts) > 1 else ""
            raise InvalidArgument(_as_tensors(exc.message) + where) from None
        elements.append(fields)
    return InferCall(
        spec.name,
        tuple(elements),
        _outputs(spec.name, requested_outputs),
        tuple(by_name[PROMPT].shape[1:]),
    )


def _inputs_by_name(spec: ModelSpec, inputs: Sequence[InputTensor]) -> dict[str, InputTensor]:
    known = [t.name for t in model_inputs(spec)]
    # Parsed even where the model lists none, so that an empty one passes (a client may send
    # one to every model) and a real one is refused by `resolve`, which says why.
    parsed = {*known, NEGATIVE_PROMPT}
    by_name: dict[str, InputTensor] = {}
    for tensor in inputs:
        if tensor.name not in parsed:
            raise InvalidArgument(
                f"unexpected inference input '{tensor.name}' for model '{spec.name}'; "
                f"inputs are {', '.join(known)}"
            )
        if tensor.name in by_name:
            raise InvalidArgument(f"{tensor.name}: sent more than once")
        # Before the contents: a shared-memory input has none, and "needs 1 elements, got 0"
        # would hide the reason it is refused.
        _refuse_tensor_parameters("inputs", tensor.name, tensor.parameter_names)
        by_name[tensor.name] = tensor
    return by_name


def _elements(tensor: InputTensor) -> list[bytes]:
    name = tensor.name
    if tensor.datatype != "BYTES":
        raise InvalidArgument(f"{name}: datatype must be BYTES, got {tensor.datatype or '(none)'}")
    if len(tensor.shape) not in (1, 2) or (len(tensor.shape) == 2 and tensor.shape[1] != 1):
        raise InvalidArgument(f"{name}: shape must be [N] or [N, 1], got {list(tensor.shape)}")
    expected = math.prod(tensor.shape)
    if expected < 1:
        raise InvalidArgument(f"{name}: shape {list(tensor.shape)} has no elements; need >= 1")
    if tensor.other_contents:
        raise InvalidArgument(f"{name}: BYTES elements belong in contents.bytes_contents")
    if tensor.raw is not None and tensor.elements:
        raise InvalidArgument(
            f"{name}: send the elements in contents or in raw_input_contents, not both"
        )
    elements = split_bytes_tensor(tensor.raw, name) if tensor.raw is not None else tensor.elements
    if len(elements) != expected:
        raise InvalidArgument(
            f"{name}: shape {list(tensor.shape)} needs {expected} elements, got {len(elements)}"
        )
    return list(elements)


def _images(tensor: InputTensor | None, count: int) -> list[bytes | None]:
    """One input image per prompt element (None for each when the input was not sent)."""
    if tensor is None:
        return [None] * count
    elements = _elements(tensor)
    if len(elements) != count:
        raise InvalidArgument(
            f"{tensor.name}: {len(elements)} elements; send one per {PROMPT} element ({count})"
        )
    for index, element in enumerate(elements):
        if len(element) > INPUT_IMAGE.max_bytes:
            raise InvalidArgument(
                f"{tensor.name}[{index}]: {len(element)} bytes; the limit is "
                f"{INPUT_IMAGE.max_bytes} bytes (upload larger images with Gateway.Upload)"
            )
    return list(elements)


def _texts(tensor: InputTensor) -> list[str]:
    texts = []
    for index, element in enumerate(_elements(tensor)):
        # Elements may be as large as an input image (the shared per-element limit); a
        # text element is held to the prompt's own limit here.
        if len(element) > PROMPT_LIMIT.max_bytes:
            raise InvalidArgument(
                f"{tensor.name}[{index}]: {len(element)} bytes; the limit is "
                f"{PROMPT_LIMIT.max_bytes} bytes"
            )
        try:
            texts.append(element.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidArgument(
                f"{tensor.name}[{index}]: not valid UTF-8 (byte {exc.start})"
            ) from None
    return texts


def _fields_from_parameters(model: str, parameters: Mapping[str, ParamValue]) -> RequestFields:
    values: dict[str, object] = {}
    for name, value in parameters.items():
        if name.startswith(CLIENT_PARAMETER_PREFIX):
            continue
        if name in _INT_PARAMETERS:
            values[name] = _integer(name, value)
        elif name in _FLOAT_PARAMETERS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgument(f"{name}: expected a number, got {_kind(value)}")
            values[name] = float(value)
        elif name == OUTPUT_FORMAT:
            if not isinstance(value, str):
                raise InvalidArgument(f"{name}: expected a string, got {_kind(value)}")
            # As sent: `resolve` refuses "PNG" or " webp " naming the allowed formats, as
            # native Submit and the OpenAI face do; a KServe call must not pass what they refuse.
            values[name] = value
        elif name == "priority":
            values[name] = parse_priority_parameter(value)
        elif name == ADAPTERS:
            if not isinstance(value, str):
                raise InvalidArgument(
                    f'{name}: expected a string "name:scale,name:scale", got {_kind(value)}'
                )
            values[name] = parse_adapter_list(value, name)
        elif name == "timeout":
            micros = _integer(name, value)
            if micros < 0:
                raise InvalidArgument(f"timeout: {micros} is negative; microseconds >= 0")
            if micros > MAX_TIMEOUT_US:
                raise InvalidArgument(
                    f"timeout: {micros} microseconds is above the limit of {MAX_TIMEOUT_US} "
                    "(about 49.7 days)"
                )
            # Triton's 0 means no timeout; sub-millisecond values round up, never to 0.
            values["timeout_ms"] = math.ceil(micros / 1000) if micros else None
        else:
            raise InvalidArgument(
                f"parameters: unknown parameter '{name}'; known: {', '.join(KNOWN_PARAMETERS)}"
            )
    return RequestFields(model=model, prompt="", **values)  # type: ignore[arg-type]


def _integer(name: str, value: ParamValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}: expected an integer parameter, got {_kind(value)}")
    return value


def _kind(value: ParamValue) -> str:
    return {bool: "bool", int: "integer", float: "double", str: "string"}[type(value)]


def parse_priority_parameter(value: ParamValue) -> str:
    """REALTIME/STANDARD/BATCH by name, or the schedule-policy level 1..3 (0 = default)."""
    if isinstance(value, str):
        # Taken as sent, as every other face takes it: "batch" is refused, not read as BATCH.
        if value in _PRIORITY_LEVELS:
            return value
        raise InvalidArgument(
            f"priority: unknown value {value!r}; use REALTIME, STANDARD or BATCH, or 1..3"
        )
    level = _integer("priority", value)
    if level == 0:
        return "STANDARD"
    if not 1 <= level <= len(_PRIORITY_LEVELS):
        raise InvalidArgument(
            f"priority: {level} is out of range; allowed 1..{len(_PRIORITY_LEVELS)} "
            "(1 = REALTIME, the highest; 0 = default STANDARD)"
        )
    return _PRIORITY_LEVELS[level - 1]


# Where a tensor's data travels instead of the Triton extensions its parameters would ask for.
_TENSOR_DATA = {
    "inputs": "send the elements in contents.bytes_contents or raw_input_contents",
    "outputs": "each comes back whole in raw_output_contents",
}


def _refuse_tensor_parameters(kind: str, tensor: str, parameter_names: Sequence[str]) -> None:
    """INVALID_ARGUMENT naming `<kind>.<tensor>.parameters.<key>` if any parameter is set.

    None is honoured, so every one is refused: an answer that ignored one would read as if
    it had been honoured (plain data where shared memory or classes were asked for).
    """
    if not parameter_names:
        return
    key = min(parameter_names)
    if key.startswith("shared_memory_"):
        reason = "shared memory is not supported"
    elif key == "classification":
        reason = "classification is not supported"
    elif key.startswith("binary_data"):
        reason = f"{key} is an HTTP extension, not part of the gRPC protocol"
    else:
        reason = "unknown parameter"
    raise InvalidArgument(
        f"{kind}.{tensor}.parameters.{key}: {reason}; {kind} take no parameters "
        f"({_TENSOR_DATA[kind]})"
    )


def _outputs(model: str, requested: Sequence[RequestedOutput]) -> tuple[str, ...]:
    known = tuple(t.name for t in OUTPUTS)
    for output in requested:
        if output.name == PREVIEW:
            raise InvalidArgument(
                f"outputs: '{PREVIEW}' comes on ModelStreamInfer's progress responses when "
                "parameters.preview_every_steps is set; it cannot be requested as an output "
                f"(outputs are {', '.join(known)})"
            )
        if output.name not in known:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{model}'; "
                f"outputs are {', '.join(known)}"
            )
        _refuse_tensor_parameters("outputs", output.name, output.parameter_names)
    return tuple(dict.fromkeys(o.name for o in requested)) or known


def encode_outputs(
    results: Sequence[ElementResult], wanted: Sequence[str], element_dims: tuple[int, ...] = ()
) -> list[OutputTensor]:
    """The `wanted` output tensors (`output`, `seed`) for the results, in element order, of
    shape [N, *element_dims]."""
    shape = (len(results), *element_dims)
    tensors = []
    for name in wanted:
        if name == OUTPUT:
            mimes = list(dict.fromkeys(r.mime_type for r in results))
            # Every element of a call shares its output_format, so one type is the rule.
            content_type = mimes[0] if len(mimes) == 1 else ",".join(r.mime_type for r in results)
            tensors.append(
                OutputTensor(
                    OUTPUT,
                    "BYTES",
                    shape,
                    {"content_type": content_type},
                    join_bytes_tensor([r.data for r in results]),
                )
            )
        elif name == SEED:
            tensors.append(
                OutputTensor(SEED, "INT64", shape, {}, pack_int64([r.seed for r in results]))
            )
    return tensors


def preview_output(data: bytes, mime_type: str) -> OutputTensor:
    """The `preview` output of a per-step stream response: one encoded picture."""
    return OutputTensor(PREVIEW, "BYTES", (1,), {"mime_type": mime_type}, join_bytes_tensor([data]))


def _as_tensors(message: str) -> str:
    """A refusal with the native API's way to send an input image told as this protocol's:
    an input tensor of that name (it has no upload ids)."""
    for name in ID_FIELDS:
        message = message.replace(
            how_to_send(name), f"send it as the {name!r} input (BYTES, one image per prompt)"
        )
    return message


def refusal(exc: MeshError, deadline_set_by_call: bool = False) -> MeshError:
    """A submission the mesh refused, as Triton would report it: a deadline that no run could
    meet, or that the work queued ahead makes unreachable, is UNAVAILABLE with Triton's
    timeout message (keeping the scheduler's retry hint); anything else keeps its status.
    `deadline_set_by_call`: the call's gRPC deadline, sooner than any `timeout` parameter,
    set the jobs' deadline, so the message names that deadline instead of the parameter."""
    names_timeout = field_of(exc.message) == NATIVE_TIMEOUT
    # Both of the scheduler's refusals for lack of time, and only those, start with the
    # job's timeout field (README, Scheduling): one shorter than the job's least run is
    # DEADLINE_EXCEEDED, one the work queued ahead makes unreachable RESOURCE_EXHAUSTED.
    unreachable = exc.code is StatusCode.RESOURCE_EXHAUSTED and names_timeout
    if exc.code is not StatusCode.DEADLINE_EXCEEDED and not unreachable:
        return exc
    message = exc.message
    if names_timeout:
        # The scheduler names the native field; a KServe caller set `timeout`, or its
        # call's deadline did.
        field = (
            f"the call's gRPC deadline (the job's, being sooner than any {KSERVE_TIMEOUT})"
            if deadline_set_by_call
            else KSERVE_TIMEOUT
        )
        message = field + message.removeprefix(NATIVE_TIMEOUT)
    return MeshError(
        f"{TIMEOUT_MESSAGE} ({message})",
        code=StatusCode.UNAVAILABLE,
        retry_after_s=exc.retry_after_s,
    )


def call_deadline_sooner(timeout_ms: int | None, call_remaining_s: float | None) -> bool:
    """Whether a call with `call_remaining_s` left (None: no gRPC deadline) bounds its jobs
    sooner than their own `timeout_ms` does (None: no timeout), as `call_deadline_ms` picks."""
    if call_remaining_s is None:
        return False
    return timeout_ms is None or call_remaining_s * 1000 < timeout_ms


def job_failure(job_id: str, code: str, message: str) -> MeshError:
    """The status Triton gives the same outcome: an expired request is UNAVAILABLE there."""
    if code == StatusCode.DEADLINE_EXCEEDED:
        message = f"{TIMEOUT_MESSAGE} (job {job_id}: {message})"
    else:
        message = f"job {job_id}: {message}"
    return MeshError(message, code=kserve_code(code))
