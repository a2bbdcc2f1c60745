"""What both long-lived, multiplexed streams share (JobLink from a gateway to the scheduler,
BatchLink from the scheduler to a worker): a message carries whatever requests or events
were waiting when it was sent, each unit of work on the stream ends alone, and a stopping
server closes its streams so that they take no new work and end once their open work has.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

import grpc

from mediamesh.common.api.packing import Sized, take_pack

# Most bytes of requests or events one message carries, unless a single one is larger: small
# ones are not held behind a message that nears the receiver's limit.
PACK_BYTES = 1 << 20

M = TypeVar("M", bound=Sized)
T = TypeVar("T")


class Closable(Protocol):
    """One served stream: closing it refuses new work and ends it once its open work has."""

    def close(self) -> None:
        """Take no more work; end once the open work has."""
        ...


S = TypeVar("S", bound=Closable)


class OpenStreams(Generic[S]):
    """A server's open streams of one kind, closed together when it stops.

    A stream outlives any call, so a stopping server's grace would otherwise wait for it, and
    its peer would go on sending work over it; closed, a stream refuses new work as a
    stopped server refuses new calls, and ends once its open work has.
    """

    def __init__(self) -> None:
        self._open: set[S] = set()
        self.closing = False

    def close(self) -> None:
        """Close every open stream, and each stream opened from now on."""
        self.closing = True
        for stream in self._open:
            stream.close()

    def opened(self, stream: S) -> None:
        """Hold a stream that has just opened (closed at once when closing already)."""
        self._open.add(stream)
        if self.closing:
            stream.close()

    def ended(self, stream: S) -> None:
        """Forget a stream that has ended."""
        self._open.discard(stream)


class Outbox(Generic[M]):
    """What one end has to send on its stream, taken a message's worth at a time."""

    def __init__(self) -> None:
        self._waiting: deque[M] = deque()
        # Set when there is something to send, or whatever the sender waits on has changed.
        self.stirred = asyncio.Event()

    def put(self, item: M) -> None:
        """Send `item` with the next message."""
        self._waiting.append(item)
        self.stirred.set()

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def packs(self) -> Iterable[list[M]]:
        """The waiting items, oldest first, in messages of up to PACK_BYTES each."""
        while self._waiting:
            yield take_pack(self._waiting, PACK_BYTES)


async def read_requests(
    requests: AsyncIterator[Any], take: Callable[[Any], None], outbox: Outbox[Any]
) -> None:
    """Hand each request of each message on the stream to `take`, then stir the sender."""
    try:
        async for message in requests:
            for request in message.requests:
                take(request)
    finally:
        outbox.stirred.set()


async def served_messages(
    outbox: Outbox[M],
    reader: asyncio.Task[None],
    done: Callable[[], bool],
    message: Callable[[list[M]], T],
) -> AsyncIterator[T]:
    """A served stream's answers: what `outbox` holds, a message at a time, until the reading
    has ended (or `done` says the stream is closing) and nothing is open or waiting."""
    while True:
        await outbox.stirred.wait()
        outbox.stirred.clear()
        for pack in outbox.packs():
            yield message(pack)
        if reader.done() and (failure := reader.exception()) is not None:
            raise failure  # a message that did not parse: the whole stream is refused
        if done() and not outbox:
            return


async def write_requests(
    call: grpc.aio.StreamStreamCall[Any, Any],
    outbox: Outbox[M],
    broken: Callable[[], bool],
    message: Callable[[list[M]], Any],
) -> None:
    """A client's writer: what `outbox` holds, a message at a time, until the call is
    `broken`. Returns quietly when the call ends under it (its reader reports how)."""
    try:
        while not broken():
            await outbox.stirred.wait()
            outbox.stirred.clear()
            for pack in outbox.packs():
                if broken():
                    return
                await call.write(message(pack))
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass
