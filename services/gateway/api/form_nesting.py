"""Form fields spelled with brackets, folded back into the JSON value they stand for.

The openai client sends its multipart bodies (image edits, videos) with a nested `extra_body`
value flattened into bracketed names: `adapters[][name]=style`, `adapters[][scale]=0.5`,
`webhook[url]=...`, `webhook[events][]=...`. Each leaf arrives as text. Read as they stand,
they were unknown fields, so the mesh's own fields could not be sent through that client
at all. Here they become the JSON text a form sends such a field as (what `request_from_form`
reads), each leaf typed by the GenerateRequest field it lands in: a number or a bool is read
as JSON, and a string stays the text sent, so an adapter named `123` is still a name.

An array of objects follows the convention the client's encoder relies on: a key that the
array's last object already holds starts the next object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import common_pb2

_BRACKETED = re.compile(r"^([A-Za-z_]\w*)((?:\[[^\[\]]*\])+)$")
_SEGMENT = re.compile(r"\[([^\[\]]*)\]")
_TEXT_TYPES = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_BYTES)


def bracketed_field(name: str) -> str | None:
    """The top-level field a bracketed form name belongs to (`adapters` for
    `adapters[][name]`); None for a plain name."""
    match = _BRACKETED.match(name)
    return match[1] if match else None


def folded_fields(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each top-level field that the bracketed `pairs` (name, text) spell, as JSON text.
    InvalidArgument naming the form name when two names would set one value, or one name
    uses a value both as a leaf and as a container."""
    trees: dict[str, Any] = {}
    for name, text in pairs:
        match = _BRACKETED.match(name)
        if match is None:
            raise ValueError(f"{name!r} is not a bracketed form name")
        top, rest = match.groups()
        trees[top] = _insert(trees.get(top), _SEGMENT.findall(rest), text, name)
    fields = common_pb2.GenerateRequest.DESCRIPTOR.fields_by_name
    return {
        top: json.dumps(_typed(tree, fields.get(top)), ensure_ascii=False)
        for top, tree in trees.items()
    }


def _insert(node: Any, segments: list[str], text: str, name: str) -> Any:
    if not segments:
        if node is not None:
            raise InvalidArgument(f"{name}: sent more than once; send it once")
        return text
    head, rest = segments[0], segments[1:]
    if head == "":
        items = _container(node, list, name)
        last = items[-1] if items else None
        if rest and isinstance(last, dict) and not _holds(last, rest):
            items[-1] = _insert(last, rest, text, name)
        else:
            items.append(_insert(None, rest, text, name))
        return items
    mapping = _container(node, dict, name)
    mapping[head] = _insert(mapping.get(head), rest, text, name)
    return mapping


def _container(node: Any, kind: type, name: str) -> Any:
    if node is None:
        return kind()
    if not isinstance(node, kind):
        shape = "an array" if kind is list else "an object"
        raise InvalidArgument(f"{name}: another part of the form does not make this {shape}")
    return node


def _holds(node: Any, segments: list[str]) -> bool:
    """Whether `node` already has the value `segments` would set (so the next array item
    begins); an array can always take one more."""
    if not segments:
        return True
    head = segments[0]
    if head == "" or not isinstance(node, dict) or head not in node:
        return False
    return _holds(node[head], segments[1:])


def _typed(value: Any, field: FieldDescriptor | None) -> Any:
    """`value` with its text leaves read as the field they land in takes them. A value that
    fits no field is left as it stands: the request's parser names what is wrong with it."""
    if field is None:
        return value
    if isinstance(value, list):
        return [_one(item, field) for item in value] if field.is_repeated else value
    return _one(value, field)


def _one(value: Any, field: FieldDescriptor) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if not isinstance(value, dict):
            return value
        message: Descriptor = field.message_type
        if message.GetOptions().map_entry:
            entry = message.fields_by_name["value"]
            return {key: _one(item, entry) for key, item in value.items()}
        return {key: _typed(item, message.fields_by_name.get(key)) for key, item in value.items()}
    if isinstance(value, str) and field.type not in _TEXT_TYPES:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
