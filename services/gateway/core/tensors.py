"""The Open Inference Protocol's raw tensor layouts, as plain bytes in and out.

BYTES tensors are each element as a 4-byte little-endian length and then its bytes, with
nothing between elements; INT64 tensors are 8-byte little-endian integers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from mediamesh.common.errors import InvalidArgument

_LENGTH = struct.Struct("<I")


def split_bytes_tensor(raw: bytes, name: str) -> list[bytes]:
    """The elements of a raw BYTES tensor; `name` is the tensor named in errors."""
    elements: list[bytes] = []
    view = memoryview(raw)
    offset = 0
    while offset < len(view):
        if len(view) - offset < _LENGTH.size:
            raise InvalidArgument(
                f"{name}: raw contents are malformed: element {len(elements)} has a "
                f"{len(view) - offset}-byte length prefix; each element needs a 4-byte "
                "little-endian length"
            )
        (size,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if size > len(view) - offset:
            raise InvalidArgument(
                f"{name}: raw contents are malformed: element {len(elements)} declares "
                f"{size} bytes but only {len(view) - offset} remain"
            )
        elements.append(bytes(view[offset : offset + size]))
        offset += size
    return elements


def join_bytes_tensor(elements: Sequence[bytes]) -> bytes:
    """The raw BYTES tensor of `elements`: each as a 4-byte little-endian length, then its bytes."""
    return b"".join(_LENGTH.pack(len(e)) + e for e in elements)


def pack_int64(values: Sequence[int]) -> bytes:
    """The raw INT64 tensor of `values`: 8-byte little-endian integers."""
    return struct.pack(f"<{len(values)}q", *values)


def unpack_int64(raw: bytes) -> list[int]:
    """The integers of a raw INT64 tensor; INVALID_ARGUMENT unless its length is a multiple of 8."""
    if len(raw) % 8:
        raise InvalidArgument(f"INT64 raw contents are {len(raw)} bytes, not a multiple of 8")
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))
