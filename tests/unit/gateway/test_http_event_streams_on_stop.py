"""A stopping gateway ends its open event streams at once and cleanly (the last chunk sent,
no error logged), so their clients resume with Last-Event-ID elsewhere, while other
responses still get the grace. Before, a stream of a queued job outlasted the grace and
uvicorn cancelled it with an ERROR traceback on every rollout."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from mediamesh.common.settings import TlsSettings
from mediamesh.gateway.http.server import start_http

GRACE_S = 5.0


def _app() -> FastAPI:
    app = FastAPI()

    async def forever() -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        await asyncio.Event().wait()  # a queued job: nothing more for a long while
        yield b"never"

    async def slowly() -> AsyncIterator[bytes]:
        yield b"first "
        await asyncio.sleep(0.5)
        yield b"last"

    @app.get("/events")
    async def events() -> StreamingResponse:
        return StreamingResponse(forever(), media_type="text/event-stream")

    @app.get("/download")
    async def download() -> StreamingResponse:
        return StreamingResponse(slowly(), media_type="application/octet-stream")

    return app


async def _read_all(client: httpx.AsyncClient, path: str, opened: asyncio.Event) -> bytes:
    async with client.stream("GET", path) as response:
        assert response.status_code == 200
        body = b""
        async for chunk in response.aiter_raw():
            body += chunk
            opened.set()
        return body


async def test_stop_ends_event_streams_cleanly_and_lets_downloads_finish(
    caplog: pytest.LogCaptureFixture,
):
    server = await start_http(_app(), "127.0.0.1", 0, TlsSettings())
    caplog.set_level(logging.INFO)
    async with httpx.AsyncClient(base_url=server.url, timeout=GRACE_S * 2) as client:
        stream_open, download_open = asyncio.Event(), asyncio.Event()
        stream = asyncio.create_task(_read_all(client, "/events", stream_open))
        download = asyncio.create_task(_read_all(client, "/download", download_open))
        await asyncio.wait_for(asyncio.gather(stream_open.wait(), download_open.wait()), 5)
        started = time.monotonic()
        await server.stop(GRACE_S)
        took = time.monotonic() - started
        # A dropped connection (no last chunk) would raise httpx.RemoteProtocolError here.
        assert await stream == b"retry: 1000\n\n"
        assert await download == b"first last"
    assert took < GRACE_S / 2, f"stop waited {took:.1f} s on an event stream"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


async def test_an_event_stream_that_starts_while_stopping_ends_too():
    server = await start_http(_app(), "127.0.0.1", 0, TlsSettings())
    server.event_streams.end_all()
    async with httpx.AsyncClient(base_url=server.url, timeout=GRACE_S) as client:
        stream = await asyncio.wait_for(_read_all(client, "/events", asyncio.Event()), GRACE_S)
    assert stream in (b"", b"retry: 1000\n\n")
    await server.stop(GRACE_S)
