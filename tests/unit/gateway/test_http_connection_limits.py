"""The HTTP face's own connection limits: a TLS handshake must finish within
gateway.http.tls_handshake_timeout_s, a request head must arrive within
gateway.http.header_timeout_s (however slowly its bytes trickle), a request body may not
stall for gateway.http.body_timeout_s (though it may take longer in all), and connections beyond
gateway.http.max_connections are answered 503 and closed, so one client cannot hold the
gateway's sockets and file descriptors."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewayHttpSettings, GatewaySettings, MeshConfig, TlsSettings
from mediamesh.gateway.http.server import HttpServer, start_http
from mediamesh.gateway.main import start_gateway
from tests.service.pki import SERVER_NAME, make_pki

HEAD_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 0.5
HANDSHAKE_TIMEOUT_S = 0.5
GET = b"GET /ping HTTP/1.1\r\nhost: localhost\r\n\r\n"


def app() -> FastAPI:
    served = FastAPI()

    @served.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    @served.post("/count")
    async def count(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    return served


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    limits = GatewayHttpSettings(
        header_timeout_s=HEAD_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S, max_connections=2
    )
    running = await start_http(app(), "127.0.0.1", 0, TlsSettings(), limits)
    yield running
    await running.stop(0)


async def closed_after(reader: asyncio.StreamReader, within_s: float = 5) -> float:
    """Seconds until the server closes the connection, having answered nothing more."""
    started = time.perf_counter()
    assert await asyncio.wait_for(reader.read(), within_s) == b""
    return time.perf_counter() - started


async def answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


async def test_a_connection_that_does_not_finish_its_request_head_is_closed(server: HttpServer):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /ping HTT")
    took = await closed_after(reader)
    assert HEAD_TIMEOUT_S * 0.8 < took < HEAD_TIMEOUT_S + 1.5
    writer.close()
    # A connection that sends nothing at all is closed too.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await closed_after(reader) < HEAD_TIMEOUT_S + 1.5
    writer.close()


async def test_a_tls_handshake_that_does_not_finish_in_time_is_closed(tmp_path: Path):
    pki = make_pki(tmp_path)
    tls = TlsSettings(cert_file=pki.cert_file, key_file=pki.key_file)
    limits = GatewayHttpSettings(tls_handshake_timeout_s=HANDSHAKE_TIMEOUT_S, header_timeout_s=60)
    running = await start_http(app(), "127.0.0.1", 0, tls, limits)
    try:
        # The loop is left as it was: only uvicorn's listener got the timeout.
        assert "create_server" not in vars(asyncio.get_running_loop())
        client = ssl.create_default_context(cafile=str(pki.ca_file))
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", running.port, ssl=client, server_hostname=SERVER_NAME
        )
        writer.write(GET)
        assert (await answer(reader)).startswith(b"HTTP/1.1 200")
        writer.close()
        # A client that opens a connection and never says hello: asyncio's default would
        # hold it for 60 s, and the request head's timeout starts only after the handshake.
        reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
        took = await closed_after(reader)
        assert HANDSHAKE_TIMEOUT_S * 0.8 < took < HANDSHAKE_TIMEOUT_S + 1.5
        writer.close()
    finally:
        await running.stop(0)


async def test_trickling_bytes_does_not_extend_the_deadline(server: HttpServer):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.perf_counter()

    async def trickle() -> None:
        for byte in b"GET /ping HTTP/1.1\r\nx-slow: " + b"a" * 100:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)

    sending = asyncio.ensure_future(trickle())
    await closed_after(reader)
    assert time.perf_counter() - started < HEAD_TIMEOUT_S + 1.5
    sending.cancel()
    writer.close()


async def test_each_request_on_a_kept_alive_connection_has_the_deadline(server: HttpServer):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for _ in range(2):
        writer.write(GET)
        response = await answer(reader)
        assert response.startswith(b"HTTP/1.1 200") and response.endswith(b'{"ok":true}')
    writer.write(b"GET /pi")
    assert await closed_after(reader) < HEAD_TIMEOUT_S + 1.5
    writer.close()


async def test_connections_beyond_the_limit_are_answered_503_and_closed(server: HttpServer):
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    refused = await asyncio.wait_for(reader.read(), 5)
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert b"gateway.http.max_connections" in refused
    writer.close()
    for _, held_writer in held:
        held_writer.close()
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(GET)
    assert (await answer(reader)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_the_gateway_serves_its_http_face_within_its_settings():
    settings = GatewaySettings(
        port=0,
        metrics_port=None,
        http_port=0,
        http=GatewayHttpSettings(header_timeout_s=HEAD_TIMEOUT_S, keep_alive_s=7),
    )
    gateway = await start_gateway(MeshConfig(gateway=settings, workers=[]), load_registry())
    try:
        assert gateway.http is not None
        assert gateway.http.server.config.timeout_keep_alive == 7
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.http.port)
        writer.write(b"GET /healthz HTT")
        assert await closed_after(reader) < HEAD_TIMEOUT_S + 1.5
        writer.close()
    finally:
        await gateway.stop(0)


def post_head(length: int) -> bytes:
    return (
        b"POST /count HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/octet-stream\r\n"
        b"content-length: %d\r\n\r\n" % length
    )


async def test_a_request_body_that_stalls_is_answered_408_and_closed(server: HttpServer):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.perf_counter()
    writer.write(post_head(100) + b"x" * 10)
    reply = await answer(reader)
    took = time.perf_counter() - started
    assert reply.startswith(b"HTTP/1.1 408") and b"gateway.http.body_timeout_s" in reply
    assert BODY_TIMEOUT_S * 0.8 < took < BODY_TIMEOUT_S + 1.5
    assert await closed_after(reader) < 1.5
    writer.close()


async def test_a_slow_body_that_keeps_arriving_is_served(server: HttpServer):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.perf_counter()
    writer.write(post_head(8))
    for _ in range(8):  # one byte every 0.2 s: 1.6 s in all, each gap under the timeout
        await asyncio.sleep(BODY_TIMEOUT_S * 0.4)
        writer.write(b"x")
    reply = await answer(reader)
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"bytes":8}')
    assert time.perf_counter() - started > 3 * BODY_TIMEOUT_S
    writer.close()


@pytest.mark.parametrize("sizes", [[20_000], [60_000], [120_000], [30] * 2000])
async def test_a_request_head_over_max_header_bytes_is_refused_however_it_arrives(
    server: HttpServer, sizes: list[int]
):
    # Sent in one write: h11 alone measured only a head still incomplete in its buffer.
    headers = b"".join(b"x-h%d: %s\r\n" % (index, b"a" * size) for index, size in enumerate(sizes))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /ping HTTP/1.1\r\nhost: localhost\r\n" + headers + b"\r\n")
    # uvicorn's refusal of a malformed request: a 400 whose body runs to the close.
    refused = await asyncio.wait_for(reader.read(), 5)
    assert refused.startswith(b"HTTP/1.1 400 "), refused[:80]
    writer.close()
    # A head within the limit (16 KiB by default), in one write as well, is served.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /ping HTTP/1.1\r\nhost: localhost\r\nx-h: " + b"a" * 15_000 + b"\r\n\r\n")
    assert (await answer(reader)).startswith(b"HTTP/1.1 200 ")
    writer.close()
