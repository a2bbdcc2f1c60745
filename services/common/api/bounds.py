"""Check every string and bytes field of a request message against its declared limit, and
every repeated field against its count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.limits import MAX_BATCH, REQUIRED_FIELDS, limit_of

_TEXT = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)
# Longest piece of a map key quoted in a field path.
_KEY_SHOWN = 64

# Each element type's field of a KServe tensor's contents.
_TENSOR_CONTENTS = tuple(
    f"{kind}_contents"
    for kind in ("bool", "int", "int64", "uint", "uint64", "fp32", "fp64", "bytes")
)
# The most entries a repeated (or map) field of a request may hold, by message full name and
# field name. A length is known without reading an entry, so a request of millions of tiny
# entries (5 M webhook events in 55 MB) is refused in microseconds, where walking them to
# check each one's bounds held the event loop for seconds. The public API's fields have
# their own entries (a test holds every one to it); any other repeated field, which only
# mesh services send, falls under DEFAULT_MAX_COUNT.
MAX_COUNTS: Mapping[str, Mapping[str, int]] = {
    # mediamesh.v1.Gateway
    # GatewaySettings.max_adapters_per_request is at most 64.
    "mediamesh.v1.GenerateRequest": {"adapters": 64},
    # Three events exist (completed, failed, progress); a repeat is harmless, a list is not.
    "mediamesh.v1.Webhook": {"events": 8},
    "mediamesh.v1.ListJobsRequest": {"states": 16, "models": 256},
    # inference.GRPCInferenceService: a model takes four inputs (prompt, negative_prompt,
    # image, mask_image), and a BYTES tensor holds at most a batch of elements.
    "inference.ModelInferRequest": {
        "parameters": 64,
        "inputs": 16,
        "outputs": 16,
        "raw_input_contents": 16,
    },
    "inference.ModelInferRequest.InferInputTensor": {"shape": 8, "parameters": 64},
    "inference.ModelInferRequest.InferRequestedOutputTensor": {"parameters": 64},
    "inference.InferTensorContents": dict.fromkeys(_TENSOR_CONTENTS, MAX_BATCH),
    # JobLink (Scheduler) and BatchLink (Worker): W3C trace context, `traceparent`, `tracestate`.
    "mediamesh.v1.JobLinkRequest": {"trace_context": 8},
    "mediamesh.v1.BatchLinkRequest": {"trace_context": 8},
}
# Any other repeated field: far above what a mesh service sends (a batch's jobs, a worker's
# models), far below what would stall a walk of it.
DEFAULT_MAX_COUNT = 65_536


def max_count(message: str, field: str) -> int:
    """The most entries `field` of the message named `message` may hold."""
    return MAX_COUNTS.get(message, {}).get(field, DEFAULT_MAX_COUNT)


def check_bounds(message: Message, prefix: str = "") -> None:
    """InvalidArgument naming the first field (as a path, e.g. `request.prompt`) over its limit.

    Walks only the fields that are set, so an empty message costs nothing. One walk checks
    both limits (every mesh service runs it on every message it receives): a repeated or map
    field's count is checked, by its length, before any of its entries is looked at.
    """
    owner = message.DESCRIPTOR.full_name
    for name in REQUIRED_FIELDS.get(owner, ()):
        if not getattr(message, name):
            raise InvalidArgument(f"{prefix}{name}: required")
    for field, value in message.ListFields():
        path = prefix + field.name
        if field.is_repeated:
            most = max_count(owner, field.name)
            if len(value) > most:
                raise InvalidArgument(f"{path}: {len(value)} entries; the limit is {most}")
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            _check_map(field, value, path)
        elif field.type in _TEXT:
            limit = limit_of(owner, field.name)
            if field.is_repeated:
                for index, item in enumerate(value):
                    limit.check(f"{path}[{index}]", item)
            else:
                limit.check(path, value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                for index, item in enumerate(value):
                    check_bounds(item, f"{path}[{index}].")
            else:
                check_bounds(value, f"{path}.")


def _check_map(field: FieldDescriptor, entries: Mapping[Any, Any], path: str) -> None:
    entry = field.message_type
    key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
    for key, value in entries.items():
        if key_field.type in _TEXT:
            limit_of(entry.full_name, "key").check(f"{path} key", key)
        where = f"{path}[{str(key)[:_KEY_SHOWN]!r}]"
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            check_bounds(value, f"{where}.")
        elif value_field.type in _TEXT:
            limit_of(entry.full_name, "value").check(where, value)
