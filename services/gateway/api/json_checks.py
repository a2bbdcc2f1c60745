"""A JSON request checked against its message, field by field, before the proto3 JSON parser.

The parser's own complaints name the field last or not at all ("Couldn't parse integer: 4.5
at GenerateRequest.steps"), lose the path of a nested field, and say nothing of the range
allowed; some values it takes without a word (a second spelling of a field, base64 that is
not). Here each value is held to its field's type, and an error starts with the field's path
(`webhook.bogus`, `adapters[0].scale`) and says what the field takes.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from mediamesh.common.api.bounds import max_count
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.limits import MAX_SEED

# Every integer type's range, as protobuf holds it.
INT_RANGES: dict[int, tuple[int, int]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
# Fields the mesh holds to less than their type carries, whatever the model.
_NARROWER_RANGES = {"mediamesh.v1.GenerateRequest.seed": (0, MAX_SEED)}
# The largest finite float32, the most a `float` field can hold.
_FLOAT32_MAX = 3.4028234663852886e38
# Standard or URL-safe base64, padded or not, as the proto3 JSON mapping reads bytes.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
# How much of a bad value an error quotes.
_SHOWN = 64
# Message descriptors are typed Any: protobuf's stubs type a message's DESCRIPTOR as a union
# with upb's own Descriptor class, which no annotation here can name.


def check_json_message(body: object, descriptor: Any, path: str = "") -> None:
    """InvalidArgument naming the first field of `body` (a JSON object of `descriptor`'s
    fields, keyed by proto or JSON name) whose value the field cannot take, or that the
    message does not have; `path` is where `body` sits in the request ("" at the top)."""
    if not isinstance(body, dict):
        where = path or "request"
        raise InvalidArgument(
            f"{where}: must be a JSON object of {descriptor.name} fields, got {_shown(body)}"
        )
    seen: dict[str, str] = {}
    for key, value in body.items():
        field = _field_named(descriptor, str(key))
        name = f"{path}.{key}" if path else str(key)
        if field is None:
            raise InvalidArgument(f"{name}: {descriptor.name} has no such field")
        if field.name in seen:
            raise InvalidArgument(f"{name}: given twice (also as {seen[field.name]!r})")
        seen[field.name] = str(key)
        if value is None:
            continue  # null leaves a field unset, as the JSON mapping says
        if field.is_repeated and isinstance(value, list | dict):
            # By length, before any entry is looked at (as gRPC requests are, `max_count`).
            limit = max_count(descriptor.full_name, field.name)
            if len(value) > limit:
                raise InvalidArgument(f"{name}: {len(value)} entries; the limit is {limit}")
        if field.is_repeated and not _is_map(field):
            if not isinstance(value, list):
                raise InvalidArgument(f"{name}: must be a JSON array, got {_shown(value)}")
            for index, item in enumerate(value):
                _check_value(field, item, f"{name}[{index}]")
        else:
            _check_value(field, value, name)


def _field_named(descriptor: Any, key: str) -> FieldDescriptor | None:
    field = descriptor.fields_by_name.get(key)
    if field is not None:
        return field
    return next((f for f in descriptor.fields if f.json_name == key), None)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _check_value(field: FieldDescriptor, value: object, path: str) -> None:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        if _is_map(field):
            if not isinstance(value, dict):
                raise InvalidArgument(f"{path}: must be a JSON object, got {_shown(value)}")
        elif not field.message_type.full_name.startswith("google.protobuf."):
            check_json_message(value, field.message_type, path)
    elif kind in INT_RANGES:
        low, high = _NARROWER_RANGES.get(field.full_name, INT_RANGES[kind])
        _check_whole_number(value, path, low, high)
    elif kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        _check_number(value, path, _FLOAT32_MAX if kind == FieldDescriptor.TYPE_FLOAT else None)
    elif kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise InvalidArgument(f"{path}: must be true or false, got {_shown(value)}")
    elif kind == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise InvalidArgument(f"{path}: must be a string, got {_shown(value)}")
    elif kind == FieldDescriptor.TYPE_BYTES:
        _check_base64(value, path)
    elif kind == FieldDescriptor.TYPE_ENUM:
        _check_enum(field, value, path)


def _check_whole_number(value: object, path: str, low: int, high: int) -> None:
    # Not a number at all: the type's range would mislead (steps take 1 to 8 on one model,
    # not 0 to 4294967295), and the model's own range is checked once this parses.
    number = _whole_number(value)
    if number is None:
        raise InvalidArgument(f"{path}: must be a whole number, got {_shown(value)}")
    if not low <= number <= high:
        raise InvalidArgument(
            f"{path}: must be a whole number from {low} to {high}, got {_shown(value)}"
        )


def _whole_number(value: object) -> int | None:
    """The integer a JSON value stands for (the mapping also takes one as a string, and
    1.0 for 1); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _check_number(value: object, path: str, largest: float | None) -> None:
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        else:
            if not math.isfinite(number):
                return  # "NaN" and "Infinity" are how the mapping spells those values
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = math.nan
    if not math.isfinite(number) or (largest is not None and abs(number) > largest):
        span = f" from {-largest:.8g} to {largest:.8g}" if largest is not None else ""
        raise InvalidArgument(f"{path}: must be a number{span}, got {_shown(value)}")


def _check_base64(value: object, path: str) -> None:
    if isinstance(value, str):
        text = "".join(value.split())
        if _BASE64.fullmatch(text) and len(text.rstrip("=")) % 4 != 1:
            standard = text.rstrip("=").replace("-", "+").replace("_", "/")
            try:
                base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
                return
            except binascii.Error:
                pass
    raise InvalidArgument(
        f"{path}: must be base64 (standard or URL-safe alphabet), got {_shown(value)}"
    )


def _check_enum(field: FieldDescriptor, value: object, path: str) -> None:
    names = [v.name for v in field.enum_type.values]
    if isinstance(value, str) and value in names:
        return
    # A number is how the mapping spells a value this build may not know; the request's own
    # checks judge it.
    if isinstance(value, int) and not isinstance(value, bool):
        return
    raise InvalidArgument(f"{path}: must be one of {', '.join(names)}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """`value` as JSON writes it, cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
