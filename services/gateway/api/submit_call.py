"""Gateway.Submit over gRPC: no job for a call that can no longer learn its id.

A Submit's answer is the only place its caller learns the job's id. A call whose deadline
has passed, or that its client cancelled, gets no answer, so a job made for it runs for
nobody, and a client that retries without an idempotency key makes it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import grpc

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.gateway.core.tenancy import Caller

log = logging.getLogger("mediamesh.gateway")

NO_TIME_LEFT_MESSAGE = (
    "the call's gRPC deadline passed before the gateway could submit the job; no job was "
    "made (give the call more time)"
)
ENDED_MESSAGE = (
    "the call's gRPC deadline passed while the scheduler accepted the job; the job was "
    "cancelled, since its id could no longer reach the caller (an idempotency_key keeps it)"
)


class SubmittingPlane(Protocol):
    """What this needs of the DataPlane: submitting a job and cancelling one."""

    async def submit(
        self, request: common_pb2.GenerateRequest, caller: Caller
    ) -> gateway_pb2.JobHandle:
        """Admits and submits the job; its handle, or MeshError."""
        ...

    async def cancel(self, job_id: str, caller: Caller) -> common_pb2.JobInfo:
        """Cancels the caller's job; MeshError if the scheduler cannot."""
        ...


async def submit_for_call(
    plane: SubmittingPlane,
    request: common_pb2.GenerateRequest,
    caller: Caller,
    context: grpc.aio.ServicerContext[Any, Any],
) -> gateway_pb2.JobHandle:
    """Submits `request` unless the call has no time left (DEADLINE_EXCEEDED, nothing made).

    A job the scheduler accepts after the call is over (its deadline passed, or its client
    cancelled it) is cancelled, unless the request carries an idempotency_key: a retry with
    the key gets that same job, so it is kept for it."""
    if _no_time_left(context):
        raise MeshError(NO_TIME_LEFT_MESSAGE, code=StatusCode.DEADLINE_EXCEEDED)
    # Shielded: the scheduler may have made the job already, and only its answer names it.
    submitting = asyncio.ensure_future(plane.submit(request, caller))
    submitting.add_done_callback(_consume_outcome)
    try:
        handle = await asyncio.shield(submitting)
    except asyncio.CancelledError:
        if not request.idempotency_key:
            await _cancel_when_accepted(plane, submitting, caller)
        raise
    if request.idempotency_key or not (context.done() or _no_time_left(context)):
        return handle
    await _cancel_unheard(plane, handle.job_id, caller)
    if context.done():
        return handle  # its status is already sent: nobody reads this
    raise MeshError(ENDED_MESSAGE, code=StatusCode.DEADLINE_EXCEEDED)


def _no_time_left(context: grpc.aio.ServicerContext[Any, Any]) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


async def _cancel_when_accepted(
    plane: SubmittingPlane, submitting: asyncio.Future[gateway_pb2.JobHandle], caller: Caller
) -> None:
    """Waits out the scheduler's answer to a call that has ended, and cancels the job it
    names. A refusal made no job; a second cancellation (shutdown) leaves the job as it is."""
    with contextlib.suppress(MeshError):
        handle = await submitting
        await _cancel_unheard(plane, handle.job_id, caller)


async def _cancel_unheard(plane: SubmittingPlane, job_id: str, caller: Caller) -> None:
    try:
        await plane.cancel(job_id, caller)
    except MeshError as exc:
        # Already ended, or the scheduler is gone: the job is logged for an operator to find.
        log.warning("could not cancel job %s, whose Submit call had ended: %s", job_id, exc)
        return
    log.info("cancelled job %s: its Submit call ended before the job's id reached it", job_id)


def _consume_outcome(submitting: asyncio.Future[gateway_pb2.JobHandle]) -> None:
    """Marks the submission's error as seen when the call's handler no longer waits for it,
    so asyncio does not log it as never retrieved."""
    if not submitting.cancelled():
        submitting.exception()
