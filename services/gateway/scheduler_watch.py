"""Whether a gateway is worth routing to: not while it has lost its scheduler.

A gateway without a scheduler can only answer UNAVAILABLE. Reporting NOT_SERVING once the
scheduler has been gone for a while lets readiness (Kubernetes, a load balancer) send
callers to a gateway that can still reach one.

A scheduler that refuses the gateway's credential is as good as lost: every call fails. The
probe asks over the gateway's internal channel, which presents the internal token (and the
internal_tls certificate) on every call, Health included, and the scheduler refuses a wrong
token even on Health, so such a gateway turns NOT_SERVING as well; an open probe alone would
pass while every caller got an error.

The probe asks the scheduler's `liveness` name. Its readiness also turns NOT_SERVING while
its job store takes no writes, which every gateway would see at once: the mesh would leave
rotation whole, reads and the scheduler's own explanation with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("mediamesh.gateway")

# Probes the scheduler; its argument is the seconds it may take. True: it answered SERVING.
Probe = Callable[[float], Awaitable[bool]]


class SchedulerWatch:
    """Probes the scheduler every `interval_s`; sets the gateway NOT_SERVING once every probe
    for `lost_after_s` failed, and SERVING again at the first that succeeds."""

    def __init__(
        self,
        probe: Probe,
        set_serving: Callable[[bool], Awaitable[None]],
        lost_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._set_serving = set_serving
        self.lost_after_s = lost_after_s
        # Several probes fit in the allowance, so one slow answer cannot take a gateway out.
        self.interval_s = min(1.0, lost_after_s / 3)
        self._clock = clock
        self._last_answer = clock()
        self.serving = True

    async def check(self) -> None:
        """One probe, and the health change it calls for."""
        answered = await self._probe(self.interval_s)
        now = self._clock()
        if answered:
            self._last_answer = now
            if not self.serving:
                log.info("the scheduler answers again; serving")
                self.serving = True
                await self._set_serving(True)
        elif self.serving and now - self._last_answer >= self.lost_after_s:
            log.warning(
                "no SERVING answer from the scheduler (gateway.scheduler_address) for %.1f s: "
                "it is down or unreachable, or it refuses the "
                "gateway's internal_auth token or internal_tls certificate (the scheduler's "
                "log names a failing store or a refused token); "
                "reporting NOT_SERVING",
                now - self._last_answer,
            )
            self.serving = False
            await self._set_serving(False)

    async def run(self) -> None:
        """Probe until cancelled."""
        while True:
            started = self._clock()
            await self.check()
            await asyncio.sleep(max(self.interval_s - (self._clock() - started), 0.0))
