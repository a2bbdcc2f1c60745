"""Closing a followed job's exchange, whether or not a reader is inside it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.gateway.api.json_plane import Followed


def exchange(closed: list[str]) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
    async def events() -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        try:
            yield common_pb2.GenerateEvent(job_id="j")
            await asyncio.Event().wait()  # the job's end never comes
            yield common_pb2.GenerateEvent(job_id="j")
        finally:
            closed.append("j")

    return events()


async def test_closing_an_exchange_nobody_reads_closes_it_at_once() -> None:
    closed: list[str] = []
    followed = Followed("j", exchange(closed))
    await anext(followed.events)
    await followed.close()
    assert closed == ["j"]


async def test_closing_an_exchange_a_cancelled_reader_is_inside_leaves_it_to_that_reader() -> None:
    closed: list[str] = []
    followed = Followed("j", exchange(closed))

    async def read() -> None:
        async for _ in followed.events:
            pass

    reader = asyncio.ensure_future(read())
    await asyncio.sleep(0)
    reader.cancel()
    # As a request handler cancelled at shutdown does: close before the reader has ended.
    await followed.close()
    assert not closed
    await asyncio.gather(reader, return_exceptions=True)
    assert closed == ["j"]
