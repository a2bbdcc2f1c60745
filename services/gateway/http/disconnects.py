"""Work on a request that stops when its client goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from mediamesh.common.errors import MeshError, StatusCode

T = TypeVar("T")


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; if the client disconnects first, `work` is cancelled (and whatever
    it started with it) and MeshError CANCELLED is raised. Only once the body is read: the
    channel then carries nothing but the disconnect."""
    answering = asyncio.ensure_future(work)
    leaving = asyncio.ensure_future(_client_left(request))
    try:
        await asyncio.wait({answering, leaving}, return_when=asyncio.FIRST_COMPLETED)
        if not answering.done():
            answering.cancel()
            await asyncio.gather(answering, return_exceptions=True)
            raise MeshError("the client closed the connection", code=StatusCode.CANCELLED)
        return answering.result()
    finally:
        answering.cancel()
        leaving.cancel()


async def _client_left(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
