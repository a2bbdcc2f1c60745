"""`mediamesh batch --delete-results` at the tenant's result quota: wait while the run's own
lines can free it.

The mesh refuses a Submit while the tenant holds `result_quota_bytes` of stored results. With
--delete-results the run deletes each job once it is recorded, so a refusal while lines of
this run are under way is lifted by those lines themselves: the refused line waits for one of
them to end (and delete its job), then asks again. Only a refusal with nothing of the run under
way is one no wait would lift (the quota is held by others), and that stops the run.

Each line that ends wakes one waiting line, and a waiting line let in wakes the next, so the
run does not ask the mesh once per waiting line for every job deleted; the last line under
way to end wakes them all, for each to be let in or to find the run stuck.
"""

from __future__ import annotations

import asyncio
from collections import deque


class ResultQuotaWaits:
    """The lines of one run under way, and those waiting for them to free the quota."""

    def __init__(self) -> None:
        # Lines sent or being sent, followed, recorded or deleted; not those waiting here.
        self.under_way = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    def started(self) -> None:
        """A line is under way."""
        self.under_way += 1

    def ended(self) -> None:
        """A line ended (its job deleted, if it made one): one waiting line may get in."""
        self.under_way -= 1
        self._wake(everyone=self.under_way == 0)

    def let_in(self) -> None:
        """A line that waited was accepted: the quota has room, perhaps for the next too."""
        self._wake(everyone=False)

    async def wait_for_room(self) -> bool:
        """Wait for a line under way to end, and True; False at once when none is, since
        then nothing of this run can free the quota."""
        self.under_way -= 1  # the caller, no longer under way while it waits
        try:
            if self.under_way <= 0:
                return False
            woken = asyncio.get_running_loop().create_future()
            self._waiting.append(woken)
            await woken
            return True
        finally:
            self.under_way += 1

    def _wake(self, everyone: bool) -> None:
        while self._waiting:
            woken = self._waiting.popleft()
            if woken.done():  # its line was cancelled while it waited
                continue
            woken.set_result(None)
            if not everyone:
                return
