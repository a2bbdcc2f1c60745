"""Packing waiting messages into one write: in order, up to the size, never an empty pack."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from mediamesh.common.api.packing import take_pack


@dataclass
class Message:
    size: int

    def ByteSize(self) -> int:
        return self.size


def test_messages_are_packed_in_order_up_to_the_limit() -> None:
    waiting = deque(Message(s) for s in (40, 50, 20, 5))
    assert [m.size for m in take_pack(waiting, 100)] == [40, 50]
    assert [m.size for m in take_pack(waiting, 100)] == [20, 5]
    assert not waiting


def test_a_message_over_the_limit_goes_alone() -> None:
    waiting = deque(Message(s) for s in (500, 1))
    assert [m.size for m in take_pack(waiting, 100)] == [500]
    assert [m.size for m in take_pack(waiting, 100)] == [1]
