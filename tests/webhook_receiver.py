"""A webhook receiver on loopback for tests: a bare asyncio HTTP/1.1 server that records
every POST and answers with the status codes it is told to.

Two misbehaving modes stand for a hostile tenant's receiver: "drip" answers 200 with a
`Content-Length` of DRIP_BODY_BYTES and then sends one byte of that body every
`drip_interval_s` (no read ever times out, the answer never ends); "huge" answers 200 with a
body of `huge_bytes` bytes, made as it is sent. Both count the body bytes the sender took
(`body_bytes_sent`): what left for the client, at most what it read plus the sockets'
buffers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

# The body a dripping receiver declares: small enough that the client would read it all.
DRIP_BODY_BYTES = 1000
_CHUNK = b"x" * 65536


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    # time.monotonic() when it arrived.
    at: float


@dataclass
class Receiver:
    """What arrived, and what to answer next (`statuses` in turn, then `default_status`)."""

    port: int = 0
    statuses: list[int] = field(default_factory=list)
    default_status: int = 200
    received: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    mode: Literal["normal", "drip", "huge"] = "normal"
    drip_interval_s: float = 2.0
    huge_bytes: int = 1500 * 2**20
    # Body bytes handed to the socket (drained) by the misbehaving modes.
    body_bytes_sent: int = 0
    # The connections being served, cancelled when the receiver stops.
    serving: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        """The receiver's URL (path /hook)."""
        return f"http://127.0.0.1:{self.port}/hook"

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """Wait until at least `count` requests arrived; returns them all."""

        async def enough() -> None:
            while len(self.received) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), timeout)
        return list(self.received)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection's requests (keep-alive) until the client closes it."""
        task = asyncio.current_task()
        if task is not None:
            self.serving.add(task)
            task.add_done_callback(self.serving.discard)
        try:
            while request_line := await reader.readline():
                headers: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                path = request_line.decode("latin-1").split(" ")[1]
                self.received.append(Received(path, headers, body, time.monotonic()))
                self.arrived.set()
                status = self.statuses.pop(0) if self.statuses else self.default_status
                if self.mode == "drip":
                    await self._drip(writer, status)
                    return
                if self.mode == "huge":
                    await self._huge(writer, status)
                    return
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode("latin-1"))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _drip(self, writer: asyncio.StreamWriter, status: int) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {DRIP_BODY_BYTES}\r\n\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()
        for _ in range(DRIP_BODY_BYTES):
            await asyncio.sleep(self.drip_interval_s)
            writer.write(b"x")
            await writer.drain()
            self.body_bytes_sent += 1

    async def _huge(self, writer: asyncio.StreamWriter, status: int) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {self.huge_bytes}\r\n\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()
        left = self.huge_bytes
        while left > 0:
            piece = _CHUNK[: min(left, len(_CHUNK))]
            writer.write(piece)
            await writer.drain()
            self.body_bytes_sent += len(piece)
            left -= len(piece)


@asynccontextmanager
async def webhook_receiver() -> AsyncIterator[Receiver]:
    """A receiver listening on a free loopback port until the block ends."""
    receiver = Receiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        server.close()
        for task in list(receiver.serving):
            task.cancel()
        await asyncio.gather(*receiver.serving, return_exceptions=True)
        await server.wait_closed()
