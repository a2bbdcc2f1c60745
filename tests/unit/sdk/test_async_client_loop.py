"""An AsyncClient belongs to the event loop it was created in, and says so when misused."""

from __future__ import annotations

import asyncio

import pytest

from mediamesh.sdk import AsyncClient, EventLoopError, GatewayError

# Nothing listens here: the misuse is refused before any call is tried.
NOWHERE = "127.0.0.1:9"


def test_created_without_a_running_loop_it_names_the_rule() -> None:
    # As at module level, before asyncio.run.
    with pytest.raises(EventLoopError, match=r"create the AsyncClient inside the event loop"):
        AsyncClient(NOWHERE, timeout_s=1)
    assert issubclass(EventLoopError, RuntimeError)


def test_used_in_a_second_asyncio_run_it_names_the_rule() -> None:
    async def make() -> AsyncClient:
        return AsyncClient(NOWHERE, timeout_s=1)

    client = asyncio.run(make())

    async def use() -> None:
        await client.get("j-1")

    with pytest.raises(EventLoopError, match=r"created in another event loop"):
        asyncio.run(use())

    async def follow() -> None:
        async for _ in client.watch("j-1"):
            pass

    with pytest.raises(EventLoopError, match=r"inside the event loop that uses it"):
        asyncio.run(follow())


async def test_inside_its_loop_it_works_and_closes() -> None:
    async with AsyncClient(NOWHERE, timeout_s=1) as client:
        with pytest.raises(GatewayError) as caught:
            await client.get("j-1")
        assert caught.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
