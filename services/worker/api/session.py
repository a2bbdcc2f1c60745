"""The worker's Attach session with the scheduler: register, then heartbeat; reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from mediamesh.v1 import scheduler_pb2, scheduler_pb2_grpc

from services.common.channels import internal_channel
from services.worker.runtime import WorkerRuntime

log = logging.getLogger("mediamesh.worker")


class SchedulerSession:
    def __init__(
        self,
        runtime: WorkerRuntime,
        registration: scheduler_pb2.WorkerRegistration,
        scheduler_address: str,
        token: str | None,
    ) -> None:
        self.runtime = runtime
        self.registration = registration
        self.address = scheduler_address
        self.token = token
        self.registered = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever(), name="scheduler-session")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run_forever(self) -> None:
        backoff = 0.2
        while True:
            channel = internal_channel(self.address, self.token)
            try:
                await self._attach(scheduler_pb2_grpc.SchedulerStub(channel))
                backoff = 0.2
            except grpc.aio.AioRpcError as exc:
                if self.registered.is_set():
                    log.warning("lost the scheduler at %s: %s", self.address, exc.code().name)
            except Exception as exc:
                # A write to a call the scheduler already ended raises InvalidStateError, not
                # an RPC error; any such failure must lead to a reconnect, never end the session.
                log.warning("scheduler session at %s failed: %r; reconnecting", self.address, exc)
            finally:
                self.registered.clear()
                await channel.close()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _attach(self, stub: scheduler_pb2_grpc.SchedulerStub) -> None:
        # Writes go through the call object rather than a request generator, so cancelling
        # the session never has to close a generator that is still suspended in a wait.
        call = stub.Attach()
        try:
            await call.write(scheduler_pb2.WorkerMessage(register=self.registration))
            reply = await call.read()
            if reply is grpc.aio.EOF or not reply.registered:
                return
            self.registered.set()
            log.info("registered with the scheduler at %s", self.address)
            every = reply.heartbeat_interval_s or 1.0
            while True:
                self.runtime.state_changed.clear()
                await call.write(
                    scheduler_pb2.WorkerMessage(
                        heartbeat=scheduler_pb2.WorkerHeartbeat(
                            draining=self.runtime.draining,
                            running_batches=self.runtime.running_batches,
                        )
                    )
                )
                # Report a drain at once, otherwise beat at the interval the scheduler asked for.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.runtime.state_changed.wait(), every)
        finally:
            call.cancel()
