"""What a JSON value is, in the words of a refusal ("expected a string, got an array")."""

from __future__ import annotations


def json_kind(value: object) -> str:
    """`value`'s JSON kind: null, true, false, a number, a string, an array or an object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
