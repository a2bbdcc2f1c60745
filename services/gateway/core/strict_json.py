"""JSON text from a client, parsed so that every fault is an InvalidArgument naming its place.

Every JSON the gateway reads from a caller (an HTTP body, a form field holding JSON, a KServe
REST request) goes through `parse_json`. Python's parser alone has four ways to fail that
are not JSON syntax errors, and each would otherwise escape as a 500: an integer of more than
4300 digits (ValueError), arrays nested past the interpreter's stack (RecursionError), an
object naming a key twice, where it silently keeps the last value, and a lone UTF-16
surrogate (`"\\ud800"`, or its three bytes as sent), which Python keeps in the string and
which no UTF-8 text can hold: every later `encode()` of it fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from mediamesh.common.errors import InvalidArgument

# How deep a caller's JSON may nest: a job's request is at most 4 levels deep. Deeper text is
# refused without a stack that deep being built.
MAX_JSON_DEPTH = 64
# A surrogate left alone after parsing: the parser joins each escaped pair into one character.
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json(
    text: bytes | str, where: str, *, keys_under: str = "", not_json: str | None = None
) -> object:
    """`text` parsed; InvalidArgument naming `where` (the body, or a field) when it is not
    JSON (`not_json`, when given, is that refusal's whole message), nests deeper than
    MAX_JSON_DEPTH or holds an integer Python will not read, and naming the key (prefixed
    with `keys_under`) when an object gives one twice, or the string or key (its path, under
    `keys_under`) that holds a lone surrogate."""
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
    _check_utf8(parsed, where, keys_under)
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


def _check_utf8(value: object, where: str, keys_under: str) -> None:
    """InvalidArgument naming the first string or key in `value` that holds a lone surrogate,
    as the gRPC face refuses text that is not UTF-8. Checked here, once, so that no field
    of any face meets one later in an `encode()` that would fail as a 500."""
    found = _first_surrogate(value)
    if found is None:
        return
    path, text, is_key = found
    root = keys_under.removesuffix(".") or where
    field = root + "".join(
        f"[{part}]" if isinstance(part, int) else f".{_shown(part)}" for part in path
    )
    if not keys_under and path and isinstance(path[0], str):
        field = field.removeprefix(root + ".")  # the body's own fields are named bare
    position = _SURROGATE.search(text)
    assert position is not None
    what = "the key holds" if is_key else "holds"
    raise InvalidArgument(
        f"{field}: not valid UTF-8 ({what} a lone surrogate, {_shown(position.group())}, "
        f"at character {position.start()})"
    )


def _first_surrogate(value: object) -> tuple[list[str | int], str, bool] | None:
    """The path to the first string or key holding a lone surrogate, that text, and whether
    it is a key; None when there is none. Recursive: the depth is checked before."""
    if isinstance(value, str):
        return ([], value, False) if _has_surrogate(value) else None
    items: list[tuple[str | int, object]]
    if isinstance(value, dict):
        for key in value:
            if _has_surrogate(key):
                return ([key], key, True)
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return None
    for part, child in items:
        found = _first_surrogate(child)
        if found is not None:
            found[0].insert(0, part)
            return found
    return None


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def _shown(text: str) -> str:
    """`text` as a message can quote it: a surrogate as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
