"""Check every string and bytes field of a request message against its declared limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from mediamesh.common.limits import limit_of

_TEXT = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)
# Longest piece of a map key quoted in a field path.
_KEY_SHOWN = 64


def check_bounds(message: Message, prefix: str = "") -> None:
    """InvalidArgument naming the first field (as a path, e.g. `request.prompt`) over its limit.

    Walks only the fields that are set, so an empty message costs nothing.
    """
    owner = message.DESCRIPTOR.full_name
    for field, value in message.ListFields():
        path = prefix + field.name
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
