"""Writes that arrive while one is in progress share the next transaction.

At high request rates one commit per new job (one WAL sync, one hop to the store's thread)
was a large share of the scheduler's time. Each caller still returns only once its own row
is committed, so a job is durable before it is admitted, exactly as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
# Writes a group; returns, per item in order, None when it is committed or why it is not.
WriteGroup = Callable[[list[Item]], Awaitable[list[BaseException | None]]]


class GroupCommit(Generic[Item]):
    """Groups concurrent `add` calls into one `write_group` call per round."""

    def __init__(self, write_group: WriteGroup[Item]) -> None:
        self._write_group = write_group
        self._pending: list[tuple[Item, asyncio.Future[None]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def add(self, item: Item) -> None:
        """Returns once `item` is committed; raises what kept it from being committed."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((item, done))
        if self._writing is None:
            self._writing = asyncio.ensure_future(self._write_rounds())
        await done

    async def _write_rounds(self) -> None:
        try:
            while self._pending:
                group, self._pending = self._pending, []
                try:
                    outcomes = await self._write_group([item for item, _ in group])
                except BaseException as exc:  # the whole group failed alike
                    outcomes = [exc] * len(group)
                for (_, done), outcome in zip(group, outcomes, strict=True):
                    if done.done():
                        continue
                    if outcome is None:
                        done.set_result(None)
                    else:
                        done.set_exception(outcome)
        finally:
            self._writing = None
