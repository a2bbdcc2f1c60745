"""Hypothesis strategies read off protobuf descriptors, so a field added to a proto is fuzzed
without anyone listing it here.

- `messages`: any message the schema allows: every field set or unset, numbers at their
  type's bounds, enums outside their declared values, and every string and bytes field at and
  one byte past its declared limit (`mediamesh.common.limits`), or matching its pattern.
- `wire_bytes`: protobuf wire format with the declared field numbers under wrong wire types,
  strings that are not UTF-8, overlong varints and lengths that overrun the message.
- `raw_requests`: those, plain random bytes, and valid messages cut short or with a byte
  changed: bytes no parser is obliged to accept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from mediamesh.common.limits import FieldLimit, limit_of
from mediamesh.gateway.api.json_checks import INT_RANGES

# Extra values for one field, by (message full name, field name): names the server knows, so
# that fuzzed requests also get past the first lookup. Drawn alongside the generic values.
Hints = Mapping[tuple[str, str], st.SearchStrategy[Any]]

MAX_DEPTH = 4
MAX_REPEATED = 3
# Characters of 1 to 4 UTF-8 bytes, to fill a field to its byte limit in each width.
_WIDE_CHARACTERS = ("a", "é", "€", "\U0001d11e")
_INT_BOUNDS: Mapping[int, tuple[int, int]] = INT_RANGES
_VARINT, _FIXED64, _LENGTH, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5


def integers_of(low: int, high: int) -> st.SearchStrategy[int]:
    """Any integer in [low, high], often a bound, a sign or power-of-two edge, or a small one."""
    edges = {low, high, 0, 1, high - 1, low + 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1}
    edges |= {-1, -(2**31), -(2**31) - 1, -(2**63)}
    return st.one_of(
        st.sampled_from(sorted(e for e in edges if low <= e <= high)),
        st.integers(max(low, -4), min(high, 80)),
        st.integers(low, high),
    )


def text_values(limit: FieldLimit) -> st.SearchStrategy[str]:
    """Short text of any characters, text filling `limit` exactly or one byte past it, and,
    for a limit with a pattern, text that matches it."""
    common = [st.text(max_size=16), st.sampled_from(["", " ", "\x00", "é", "a" * 3])]
    if limit.pattern is not None:
        common.append(st.from_regex(limit.pattern, fullmatch=True))
    at_limit = st.builds(_filled, st.just(limit.max_bytes), st.sampled_from(_WIDE_CHARACTERS))
    return _mostly(st.one_of(common), st.one_of(at_limit, st.just("a" * (limit.max_bytes + 1))))


def bytes_values(limit: FieldLimit) -> st.SearchStrategy[bytes]:
    """Short bytes, and bytes filling `limit` exactly or one past it."""
    return _mostly(
        st.binary(max_size=16),
        st.sampled_from([b"\x00" * limit.max_bytes, b"\xff" * (limit.max_bytes + 1)]),
    )


def _mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`common` seven times in eight: values at a limit can be megabytes, and cost a call each."""
    return st.integers(0, 7).flatmap(lambda n: rare if n == 7 else common)


def _filled(size: int, character: str) -> str:
    """Exactly `size` UTF-8 bytes, mostly of `character`."""
    width = len(character.encode())
    return character * (size // width) + "a" * (size % width)


def value_strategy(
    field: FieldDescriptor, owner: str, hints: Hints, depth: int
) -> st.SearchStrategy[Any]:
    """One value of `field` (one element, for a repeated field) of the message `owner`."""
    generic = _generic_value(field, owner, hints, depth)
    hint = hints.get((owner, field.name))
    if hint is None:
        return generic
    if field.type in _INT_BOUNDS:
        low, high = _INT_BOUNDS[field.type]
        hint = hint.filter(lambda value: low <= value <= high)
    return st.one_of(hint, generic)


def _generic_value(
    field: FieldDescriptor, owner: str, hints: Hints, depth: int
) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return text_values(limit_of(owner, field.name))
    if kind == FieldDescriptor.TYPE_BYTES:
        return bytes_values(limit_of(owner, field.name))
    if kind in _INT_BOUNDS:
        return integers_of(*_INT_BOUNDS[kind])
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        declared = [v.number for v in field.enum_type.values]
        # proto3 enums are open: a number no value has still parses.
        return st.one_of(st.sampled_from(declared), integers_of(-(2**31), 2**31 - 1))
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, hints, depth + 1)
    raise AssertionError(f"{owner}.{field.name}: no strategy for field type {kind}")


def messages(
    descriptor: Descriptor, hints: Hints | None = None, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Any `descriptor` message: each field unset or set to a value of its type."""
    hints = hints or {}
    message_class = GetMessageClass(descriptor)
    if depth > MAX_DEPTH:
        return st.builds(message_class)
    setters: dict[str, st.SearchStrategy[Callable[[Message], None]]] = {}
    for field in descriptor.fields:
        setters[field.name] = st.one_of(st.none(), _setter(field, descriptor, hints, depth))
    return st.fixed_dictionaries(setters).map(lambda chosen: _build(message_class, chosen))


def variations(base: Message, hints: Hints | None = None) -> st.SearchStrategy[Message]:
    """`base` (a valid request) with one to three of its fields set to fuzzed values: requests
    that get past the first checks, and reach the code behind them."""
    descriptor = cast(Descriptor, base.DESCRIPTOR)
    setter = st.sampled_from(list(descriptor.fields)).flatmap(
        lambda field: _setter(field, descriptor, hints or {}, 0)
    )
    return st.lists(setter, min_size=1, max_size=3).map(lambda chosen: _varied(base, chosen))


def _varied(base: Message, setters: list[Callable[[Message], None]]) -> Message:
    message = type(base)()
    message.CopyFrom(base)
    for set_field in setters:
        set_field(message)
    return message


def _build(
    message_class: type[Message], chosen: Mapping[str, Callable[[Message], None] | None]
) -> Message:
    message = message_class()
    for set_field in chosen.values():
        if set_field is not None:
            set_field(message)
    return message


def _setter(
    field: FieldDescriptor, owner: Descriptor, hints: Hints, depth: int
) -> st.SearchStrategy[Callable[[Message], None]]:
    name = field.name
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        entry = field.message_type
        key = value_strategy(entry.fields_by_name["key"], entry.full_name, hints, depth)
        value = value_strategy(entry.fields_by_name["value"], entry.full_name, hints, depth)
        entries = st.dictionaries(key, value, max_size=MAX_REPEATED)
        return entries.map(lambda items: lambda m: _set_map(getattr(m, name), items))
    value = value_strategy(field, owner.full_name, hints, depth)
    if field.is_repeated:
        items = st.lists(value, max_size=MAX_REPEATED)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            return items.map(lambda xs: lambda m: _add_all(getattr(m, name), xs))
        return items.map(lambda xs: lambda m: getattr(m, name).extend(xs))
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return value.map(lambda x: lambda m: getattr(m, name).CopyFrom(x))
    return value.map(lambda x: lambda m: setattr(m, name, x))


def _add_all(target: Any, items: list[Message]) -> None:
    for item in items:
        target.add().CopyFrom(item)


def _set_map(target: Any, items: Mapping[Any, Any]) -> None:
    for key, value in items.items():
        if isinstance(value, Message):
            target[key].CopyFrom(value)
        else:
            target[key] = value


# ---- wire format ---------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(number: int, wire_type: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire_type) + payload


def wire_bytes(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[bytes]:
    """Records for the message's own field numbers (and a few others) under any wire type."""
    numbers = [f.number for f in descriptor.fields] or [1]
    number = st.one_of(st.sampled_from(numbers), st.integers(1, 2**29 - 1))
    record = st.one_of(
        st.builds(lambda n, v: _record(n, _VARINT, _varint(v)), number, integers_of(0, 2**64 - 1)),
        # A varint of 11 bytes: longer than any 64-bit value takes.
        st.builds(lambda n: _record(n, _VARINT, b"\xff" * 10 + b"\x01"), number),
        st.builds(lambda n, b: _record(n, _FIXED64, b), number, st.binary(min_size=8, max_size=8)),
        st.builds(lambda n, b: _record(n, _FIXED32, b), number, st.binary(min_size=4, max_size=4)),
        st.builds(
            lambda n, b: _record(n, _LENGTH, _varint(len(b)) + b),
            number,
            _length_payloads(descriptor, depth),
        ),
        # A length that claims more bytes than follow.
        st.builds(lambda n, b: _record(n, _LENGTH, _varint(len(b) + 7) + b), number, st.binary()),
        st.builds(lambda n, t: _record(n, t, b""), number, st.sampled_from([3, 4, 6, 7])),
    )
    return st.lists(record, max_size=4).map(b"".join)


def _length_payloads(descriptor: Descriptor, depth: int) -> st.SearchStrategy[bytes]:
    # Invalid UTF-8 (a lone continuation byte, a truncated sequence, an encoded surrogate)
    # in whichever string field the number names.
    choices = [st.binary(max_size=24), st.sampled_from([b"\x80", b"a\xc3", b"\xed\xa0\x80"])]
    if depth < MAX_DEPTH:
        for field in descriptor.fields:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                choices.append(wire_bytes(field.message_type, depth + 1))
    return st.one_of(choices)


def _mutated(data: bytes, index: int, byte: int, cut: bool) -> bytes:
    if not data:
        return bytes([byte])
    index %= len(data)
    return data[:index] if cut else data[:index] + bytes([byte]) + data[index + 1 :]


def raw_requests(descriptor: Descriptor, hints: Hints | None = None) -> st.SearchStrategy[bytes]:
    """Bytes sent as a `descriptor` request that are seldom a valid one."""
    serialized = messages(descriptor, hints).map(lambda m: m.SerializeToString())
    return st.one_of(
        st.binary(max_size=64),
        wire_bytes(descriptor),
        st.builds(_mutated, serialized, st.integers(0, 2**16), st.integers(0, 255), st.booleans()),
    )
