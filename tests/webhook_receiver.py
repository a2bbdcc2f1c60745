"""A webhook receiver on loopback for tests: a bare asyncio HTTP/1.1 server that records
every POST and answers with the status codes it is told to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


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
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode("latin-1"))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


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
        await server.wait_closed()
