"""What both long-lived, multiplexed streams share (JobLink from a gateway to the scheduler,
BatchLink from the scheduler to a worker): a message carries whatever requests or events
were waiting when it was sent, each unit of work on the stream ends alone, and a stopping
server closes its streams so that they take no new work and end once their open work has.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

import grpc

from mediamesh.common.api.packing import Sized, take_pack

log = logging.getLogger(__name__)

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


R = TypeVar("R", bound=Sized)
A = TypeVar("A")
E = TypeVar("E", bound=Sized)


class ServedStream(Generic[E]):
    """A server's end of one stream: its open units of work and the events waiting to be
    sent. Subclasses take each request (`_take`), say whether any unit is open
    (`_has_open`) and stop them all (`stop_all`)."""

    def __init__(self, message: Callable[[list[E]], Any]) -> None:
        self._message = message
        self._outbox: Outbox[E] = Outbox()
        self._closing = False

    def close(self) -> None:
        """Take no more work; end once the open work has."""
        self._closing = True
        self._outbox.stirred.set()

    async def read(self, requests: AsyncIterator[Any]) -> None:
        """Take every request the peer sends, until it stops sending."""
        await read_requests(requests, self._take, self._outbox)

    def sent(self, reader: asyncio.Task[None]) -> AsyncIterator[Any]:
        """The messages to send, until `reader` has ended or the stream is closed, and
        nothing is open or waiting."""
        return served_messages(
            self._outbox,
            reader,
            lambda: (reader.done() or self._closing) and not self._has_open(),
            self._message,
        )

    def stop_all(self) -> None:
        """Stop every open unit of work (the stream has ended)."""
        raise NotImplementedError

    def _send(self, event: E) -> None:
        self._outbox.put(event)

    def _take(self, request: Any) -> None:
        raise NotImplementedError

    def _has_open(self) -> bool:
        raise NotImplementedError


async def serve_stream(
    stream: ServedStream[Any],
    requests: AsyncIterator[Any],
    streams: OpenStreams[Any],
    name: str,
) -> AsyncIterator[Any]:
    """`stream`'s answers to `requests`, held in `streams` while open; when it ends (or its
    peer goes away) its open work stops, as cancelling calls of their own would stop it."""
    streams.opened(stream)
    reader = asyncio.create_task(stream.read(requests), name=f"{name}-reader")
    try:
        async for message in stream.sent(reader):
            yield message
    finally:
        streams.ended(stream)
        reader.cancel()
        stream.stop_all()


class StreamClient(Generic[R, A]):
    """A client's end of one stream: a writer task packing requests, a reader task handing
    each event to the inbox of the unit of work it names. Once the call ends or breaks, every
    open unit is handed what `_broken_by` makes of the failure, and the next unit of work
    opens another stream (`broken`). Subclasses route events (`_route`) and word failures."""

    def __init__(
        self,
        call: grpc.aio.StreamStreamCall[Any, Any],
        name: str,
        message: Callable[[list[R]], Any],
    ) -> None:
        self._call = call
        self._name = name
        self._message = message
        self._inboxes: dict[Any, asyncio.Queue[A]] = {}
        self._outbox: Outbox[R] = Outbox()
        self.broken = False
        self._writer = asyncio.create_task(self._write(), name=f"{name}-writer")
        self._reader = asyncio.create_task(self._read(), name=f"{name}-reader")

    async def aclose(self) -> None:
        """End the stream and every unit of work open on it, each with `_closed()`."""
        self._fail(self._closed())
        self._call.cancel()
        for task in (self._writer, self._reader):
            task.cancel()
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)

    def _send(self, request: R) -> None:
        self._outbox.put(request)

    async def _write(self) -> None:
        try:
            await write_requests(self._call, self._outbox, lambda: self.broken, self._message)
        except Exception:
            self._give_up("writer")

    def _give_up(self, part: str) -> None:
        """A fault of this code, not of the call: no unit of work may wait on a stream that
        will never move again, so they all end and the next one opens another stream."""
        log.exception(
            "the %s stream's %s failed; a new stream takes the next one", self._name, part
        )
        self._fail(self._gave_up(part))
        self._call.cancel()

    async def _read(self) -> None:
        failure: grpc.aio.AioRpcError | None = None
        try:
            async for message in self._call:
                for event in message.events:
                    self._route(event)
        except grpc.aio.AioRpcError as exc:
            failure = exc
        except Exception:
            self._give_up("reader")
            return
        self._fail(self._broken_by(failure))

    def _fail(self, arrival: A) -> None:
        """Hand every open unit `arrival` and forget them; the next opens a new stream."""
        self.broken = True
        for inbox in self._inboxes.values():
            inbox.put_nowait(arrival)
        self._inboxes.clear()
        self._outbox.stirred.set()

    def _route(self, event: Any) -> None:
        raise NotImplementedError

    def _broken_by(self, failure: grpc.aio.AioRpcError | None) -> A:
        """What each open unit is handed when the call failed (None: the peer ended it)."""
        raise NotImplementedError

    def _closed(self) -> A:
        """What each open unit is handed when this end closes the stream."""
        raise NotImplementedError

    def _gave_up(self, part: str) -> A:
        """What each open unit is handed when this code's `part` failed."""
        raise NotImplementedError
