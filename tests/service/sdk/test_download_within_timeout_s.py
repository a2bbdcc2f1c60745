"""A download from a gateway that never answers fails within timeout_s, worded as every
unary call's failure: `cannot reach the gateway at ADDRESS (...)`."""

from __future__ import annotations

import asyncio
import socket
import time

from mediamesh.sdk import AsyncClient, Client, GatewayError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_blocking_download_from_no_gateway_fails_within_timeout_s() -> None:
    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with Client(address, timeout_s=1) as client:
        try:
            client.download("abc")
        except GatewayError as error:
            caught = error
    assert time.monotonic() - started < 2.5
    assert caught.code == "UNAVAILABLE"
    assert caught.message.startswith(f"cannot reach the gateway at {address} "), caught.message


def test_an_async_download_from_no_gateway_fails_within_timeout_s() -> None:
    address = f"127.0.0.1:{_free_port()}"

    async def download() -> GatewayError:
        async with AsyncClient(address, timeout_s=1) as client:
            try:
                await client.download("abc")
            except GatewayError as error:
                return error
        raise AssertionError("downloaded from no gateway")

    started = time.monotonic()
    caught = asyncio.run(download())
    assert time.monotonic() - started < 2.5
    assert caught.code == "UNAVAILABLE"
    assert caught.message.startswith(f"cannot reach the gateway at {address} "), caught.message
