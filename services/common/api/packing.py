"""Messages that share one write on a long-lived stream, up to a size."""

from __future__ import annotations

from collections import deque
from typing import Protocol, TypeVar


class Sized(Protocol):
    """A message that knows its encoded size, as every protobuf message does."""

    def ByteSize(self) -> int:
        """Its encoded size in bytes."""
        ...


M = TypeVar("M", bound=Sized)


def take_pack(waiting: deque[M], limit_bytes: int) -> list[M]:
    """The oldest of `waiting`, removed, up to `limit_bytes` in all; never none, so that one
    message larger than the limit goes alone rather than never."""
    pack: list[M] = []
    size = 0
    while waiting:
        next_size = waiting[0].ByteSize()
        if pack and size + next_size > limit_bytes:
            break
        pack.append(waiting.popleft())
        size += next_size
    return pack
