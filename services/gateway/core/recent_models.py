"""The model list that a submission picks its model from, fetched at most once per interval.

Each OpenAI-shaped request names or picks its model from the mesh's model list. Fetched per
request, that list cost a ListModels call to the scheduler and the conversion of every
model to JSON: at 16 concurrent echo image requests, a quarter of the gateway's event loop
(py-spy). The models themselves are fixed when the mesh starts; only their readiness moves,
and here it may be up to `fresh_s` old.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

# How long a fetched list serves later submissions, by default.
MODELS_FRESH_S = 1.0

Models = list[dict[str, Any]]


class RecentModels:
    """`fetch()`'s answer, fetched again once it is `fresh_s` old, and by one caller at a
    time: callers that arrive while a fetch is under way share its answer, or its error."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[Models]],
        fresh_s: float = MODELS_FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._fresh_s = fresh_s
        self._clock = clock
        self._models: Models | None = None
        self._fetched_at = 0.0
        self._fetching: asyncio.Future[Models] | None = None

    async def get(self) -> Models:
        """The list, as fetched no more than `fresh_s` ago. Its entries are shared: read them,
        copy before changing one."""
        if self._models is not None and self._clock() - self._fetched_at < self._fresh_s:
            return self._models
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._fetch_once())
            # Retrieved here too: every caller that waited may have left before it failed.
            self._fetching.add_done_callback(_retrieve)
        # Shielded: a caller that leaves must not cancel the fetch the others wait on.
        return await asyncio.shield(self._fetching)

    async def _fetch_once(self) -> Models:
        started = self._clock()
        try:
            models = await self._fetch()
        finally:
            self._fetching = None
        self._models, self._fetched_at = models, started
        return models


def _retrieve(fetching: asyncio.Future[Models]) -> None:
    if not fetching.cancelled():
        fetching.exception()
