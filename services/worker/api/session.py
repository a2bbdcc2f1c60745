"""The worker's Attach session with the scheduler: register, then heartbeat; reconnect
until the worker stops."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import NamedTuple

import grpc

from mediamesh.common.aio import wait_event
from mediamesh.common.channels import internal_channel
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.generated.v1 import scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.log_throttle import LogThrottle
from mediamesh.worker.api.batch_checks import reportable
from mediamesh.worker.api.registration import model_adapters, model_residency
from mediamesh.worker.runtime import WorkerRuntime

log = logging.getLogger("mediamesh.worker")

_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


# Between attempts to attach. A restarted scheduler runs no batch until its workers are
# back; with at most 5 s between attempts they came back up to 5 s after it served (the
# recovery bench's "jobs progress again"). An attempt a second is one connect to a peer
# that is down, and its failures are logged once a minute.
FIRST_ATTACH_BACKOFF_S = 0.2
MAX_ATTACH_BACKOFF_S = 1.0


class _Reported(NamedTuple):
    """What a heartbeat tells the scheduler to route by; a beat goes at once when it changes."""

    draining: bool
    adapters: dict[str, list[tuple[str, float]]]
    residency: dict[str, tuple[bool, float]]


class SchedulerSession:
    """Keeps the worker attached to the scheduler: registers, heartbeats, and reconnects with
    backoff whenever the stream fails. A draining worker (leaving, or its devices gone)
    registers as draining, so that nothing is routed to it while it can still confirm its
    last batches (`settle`).

    `registered` is set while the scheduler has accepted the current registration.
    """

    def __init__(
        self,
        runtime: WorkerRuntime,
        registration: scheduler_pb2.WorkerRegistration,
        scheduler_address: str,
        credentials: InternalCredentials,
    ) -> None:
        self.runtime = runtime
        self.registration = registration
        self.address = scheduler_address
        self.credentials = credentials
        self.registered = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # A pending `settle` question: the batch ids, and where its answer goes.
        self._settling: tuple[list[str], asyncio.Future[list[str]]] | None = None
        # The registration changed (warm-up ended) and the scheduler has not seen it yet.
        self._reregister = False
        # A refused credential or an unreachable scheduler fails every retry: the first
        # failure of each kind is logged, then one a minute.
        self._failed_attach_log = LogThrottle()

    def update_registration(self, registration: scheduler_pb2.WorkerRegistration) -> None:
        """Registers again with `registration` on the open stream (or the next one)."""
        self.registration = registration
        self._reregister = True
        self.runtime.state_changed.set()  # wakes the session loop, which sends it

    def start(self) -> None:
        """Starts the session in a background task on the running loop."""
        self._task = asyncio.create_task(self._run_forever(), name="scheduler-session")

    async def stop(self) -> None:
        """Ends the session and waits until its task has finished; the stream closes with it."""
        self._stopping = True
        task = self._task
        # Cancel until it takes: a cancel that lands inside grpc's own await can be absorbed.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)

    async def settle(self, batch_ids: list[str], timeout_s: float) -> bool:
        """Tell the scheduler these batches ended here and wait, at most `timeout_s`, until
        it confirms having applied every event of them; True when it confirmed them all.

        Call it before leaving: once the session closes, the scheduler gives up on what it
        still counts as running here, and a preempted job whose checkpoint it had not yet
        read would start over. An id the scheduler would refuse is left out (`reportable`).
        """
        batch_ids = reportable(batch_ids)
        if not batch_ids:
            return True
        if not self.registered.is_set():
            return False  # no session, so nothing for its close to lose either
        answer: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self._settling = (list(batch_ids), answer)
        self.runtime.state_changed.set()  # wakes the session loop, which asks
        try:
            # asyncio.timeout: wait_for on Python 3.11 can drop a cancellation that lands
            # as the answer arrives (see common/aio.py).
            async with asyncio.timeout(timeout_s):
                settled = await asyncio.shield(answer)
        except TimeoutError:
            return False
        finally:
            self._settling = None
        return set(batch_ids) <= set(settled)

    async def _run_forever(self) -> None:
        backoff = FIRST_ATTACH_BACKOFF_S
        while not self._stopping:
            channel = internal_channel(self.address, self.credentials)
            try:
                await self._attach(scheduler_pb2_grpc.SchedulerStub(channel))
                backoff = FIRST_ATTACH_BACKOFF_S
            except grpc.aio.AioRpcError as exc:
                if self.registered.is_set() and exc.code() not in _REFUSALS:
                    log.warning("lost the scheduler at %s: %s", self.address, exc.code().name)
                else:
                    self._log_failed_attach(exc)
            except asyncio.InvalidStateError:
                # A write to a call the scheduler already ended (it restarted, or was killed)
                # raises this rather than an RPC error: the same loss, said the same way.
                if self.registered.is_set():
                    log.warning("lost the scheduler at %s: its call ended", self.address)
            except Exception as exc:
                # Any other failure must lead to a reconnect too, never end the session.
                log.warning("scheduler session at %s failed: %r; reconnecting", self.address, exc)
            finally:
                self.registered.clear()
                await channel.close()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_ATTACH_BACKOFF_S)

    def _registration_now(self) -> scheduler_pb2.WorkerRegistration:
        """The registration, saying whether the worker drains now: a registration that did
        not (it had no field for it) drew work to a leaving worker until its first
        heartbeat, and a job it took then was lost twice for one lost worker."""
        registration = scheduler_pb2.WorkerRegistration()
        registration.CopyFrom(self.registration)
        registration.draining = self.runtime.draining
        return registration

    def _log_failed_attach(self, exc: grpc.aio.AioRpcError) -> None:
        # Retrying goes on regardless: the operator may fix the secret, the scheduler restart.
        refused = exc.code() in _REFUSALS
        kind = "refused" if refused else "unreachable"
        if not self._failed_attach_log.due(kind):
            return
        if refused:
            log.error(
                "the scheduler at %s refused this worker's internal credential (%s: %s): its "
                "internal_auth token (token or token_file) must be the scheduler's, and with "
                "internal_tls its cert_file must be signed by the scheduler's ca_file; "
                "retrying (logged at most once every %.0f s)",
                self.address,
                exc.code().name,
                exc.details(),
                self._failed_attach_log.every_s,
            )
        else:
            # A certificate the scheduler refuses ends the handshake: it looks like this too.
            log.warning(
                "cannot attach to the scheduler at %s (%s: %s); if it is up, check that "
                "internal_tls matches it; retrying (logged at most once every %.0f s)",
                self.address,
                exc.code().name,
                exc.details(),
                self._failed_attach_log.every_s,
            )

    async def _attach(self, stub: scheduler_pb2_grpc.SchedulerStub) -> None:
        # Writes go through the call object rather than a request generator, so cancelling
        # the session never has to close a generator that is still suspended in a wait.
        call = stub.Attach()
        try:
            self._reregister = False
            await call.write(scheduler_pb2.WorkerMessage(register=self._registration_now()))
            reply = await call.read()
            if reply is grpc.aio.EOF or not reply.registered:
                return
            self.registered.set()
            self._failed_attach_log.reset()  # a failure after this one is news at once
            log.info("registered with the scheduler at %s", self.address)
            every = reply.heartbeat_interval_s or 1.0
            loop = asyncio.get_running_loop()
            sent: _Reported | None = None
            sent_at = -math.inf
            while True:
                self.runtime.state_changed.clear()
                if self._reregister:
                    self._reregister = False
                    await call.write(scheduler_pb2.WorkerMessage(register=self._registration_now()))
                    reply = await call.read()
                    if reply is grpc.aio.EOF or not reply.registered:
                        return
                if self._settling is not None and not await self._ask_settled(
                    call, *self._settling
                ):
                    return
                runtime = self.runtime
                reported = _Reported(
                    runtime.draining, runtime.loaded_adapters(), runtime.residency_report()
                )
                # Every batch's start and end wake this loop, and most change nothing the
                # scheduler routes by: a beat then would cost both processes a message per
                # batch (at one job a batch, the worker's loop took the GIL from its device
                # thread for it). A change goes at once, sameness at the interval.
                if reported != sent or loop.time() - sent_at >= every:
                    await call.write(
                        scheduler_pb2.WorkerMessage(
                            heartbeat=scheduler_pb2.WorkerHeartbeat(
                                draining=reported.draining,
                                running_batches=runtime.running_batches,
                                adapters=model_adapters(reported.adapters),
                                residency=model_residency(reported.residency),
                            )
                        )
                    )
                    sent, sent_at = reported, loop.time()
                await wait_event(runtime.state_changed, max(sent_at + every - loop.time(), 0.0))
        finally:
            call.cancel()

    async def _ask_settled(
        self,
        call: grpc.aio.StreamStreamCall[
            scheduler_pb2.WorkerMessage, scheduler_pb2.SchedulerMessage
        ],
        batch_ids: list[str],
        answer: asyncio.Future[list[str]],
    ) -> bool:
        """Ask about `batch_ids` and wait for the answer; False when the scheduler ended
        the session instead. Heartbeats pause meanwhile: the scheduler keeps a worker that
        waits on its answer alive."""
        if answer.done():
            return True
        ended = scheduler_pb2.BatchesEnded(batch_ids=batch_ids)
        await call.write(scheduler_pb2.WorkerMessage(batches_ended=ended))
        while True:
            reply = await call.read()
            if not isinstance(reply, scheduler_pb2.SchedulerMessage):  # grpc.aio.EOF: it ended
                return False
            if reply.HasField("settled"):
                if not answer.done():
                    answer.set_result(list(reply.settled.batch_ids))
                return True
