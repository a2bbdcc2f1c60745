"""JSON text from a client, parsed so that every fault is an InvalidArgument naming its place.

Every JSON the gateway reads from a caller (an HTTP body, a form field holding JSON, a KServe
REST request) goes through `parse_json`. Python's parser alone has three ways to fail that
are not JSON syntax errors, and each would otherwise escape as a 500: an integer of more than
4300 digits (ValueError), arrays nested past the interpreter's stack (RecursionError), and an
object naming a key twice, where it silently keeps the last value.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from mediamesh.common.errors import InvalidArgument

# How deep a caller's JSON may nest: a job's request is at most 4 levels deep. Deeper text is
# refused without a stack that deep being built.
MAX_JSON_DEPTH = 64


def parse_json(
    text: bytes | str, where: str, *, keys_under: str = "", not_json: str | None = None
) -> object:
    """`text` parsed; InvalidArgument naming `where` (the body, or a field) when it is not
    JSON (`not_json`, when given, is that refusal's whole message), nests deeper than
    MAX_JSON_DEPTH or holds an integer Python will not read, and naming the key (prefixed
    with `keys_under`) when an object gives one twice."""
    try:
        parsed = json.loads(text, object_pairs_hook=_each_key_once(keys_under))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(not_json or f"{where}: not valid JSON ({exc})") from None
    except ValueError:
        # Python's own limit on the digits of one integer (4300), which no field needs.
        raise InvalidArgument(f"{where}: a number of more than 4300 digits") from None
    except RecursionError:
        raise InvalidArgument(too_deep(where)) from None
    brackets = (
        text.count(b"[") + text.count(b"{")
        if isinstance(text, bytes)
        else (text.count("[") + text.count("{"))
    )
    if brackets > MAX_JSON_DEPTH:
        _check_depth(parsed, where)  # only text with that many brackets can nest that deep
    return parsed


def too_deep(where: str) -> str:
    """The refusal of JSON nested past MAX_JSON_DEPTH."""
    return f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep"


def _check_depth(value: object, where: str) -> None:
    """InvalidArgument when `value` nests arrays or objects more than MAX_JSON_DEPTH deep;
    the parser took it, the validators after it might not."""
    level: list[object] = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return
    raise InvalidArgument(too_deep(where))


def _each_key_once(
    keys_under: str,
) -> Callable[[list[tuple[str, object]]], dict[str, object]]:
    def build(pairs: list[tuple[str, object]]) -> dict[str, object]:
        found: dict[str, object] = {}
        for key, value in pairs:
            if key in found:
                raise InvalidArgument(
                    f"{keys_under}{key}: given twice in one JSON object; give it once"
                )
            found[key] = value
        return found

    return build
