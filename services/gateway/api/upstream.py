"""The gateway's link to the scheduler, shared by the native and the KServe v2 APIs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import grpc

from mediamesh.common.adapters import DEFAULT_MAX_ADAPTERS_PER_REQUEST
from mediamesh.common.api.status import from_grpc
from mediamesh.common.errors import PUSHBACK_KEY, RETRY_AFTER_KEY, MeshError, StatusCode
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.log_throttle import LOG_EVERY_S, LogThrottle
from mediamesh.common.registry import Registry
from mediamesh.common.telemetry import forwarded_trace
from mediamesh.gateway.api.job_link import FINAL_EVENTS, JobLink
from mediamesh.gateway.core.tenancy import Caller, Tenancy

log = logging.getLogger("mediamesh.gateway")

SUBMIT_TIMEOUT_S = 30
# Inline input bytes (image and mask) above which a job takes a call of its own: on the
# shared link its request would hold every other job's messages behind it while it crosses
# (20 ms for 8 MiB on loopback, about 70 ms at 1 Gbit/s); a call's stream is its own.
LINK_MAX_INPUT_BYTES = 256 * 1024
# Longest one upload may stream (30 MB over a slow link).
UPLOAD_TIMEOUT_S = 600


@dataclass
class Upstream:
    """What both gateway APIs share: the scheduler stub, model registry, tenancy and size limits.

    `inline_limit` is the largest result sent inside a Watch event; larger ones are replaced by
    an artifact reference to fetch with Download.
    """

    scheduler: scheduler_pb2_grpc.SchedulerStub
    registry: Registry
    tenancy: Tenancy
    inline_limit: int
    # The gateway's own message limit: what one answer to a caller may hold.
    max_message_bytes: int = 64 * 1024 * 1024
    # LoRA adapters one request may name (GatewaySettings.max_adapters_per_request).
    max_adapters_per_request: int = DEFAULT_MAX_ADAPTERS_PER_REQUEST
    # The one stream that carries final-only jobs; without it each is a call of its own.
    link: JobLink | None = None
    # Whether the gateway's SchedulerWatch has had no answer for scheduler_lost_after_s.
    scheduler_lost: Callable[[], bool] = lambda: False
    # Whether the watch's last probe was refused for the gateway's own credential.
    scheduler_refuses: bool = False

    @classmethod
    def over(
        cls,
        channel: grpc.aio.Channel,
        registry: Registry,
        tenancy: Tenancy,
        inline_limit: int,
        max_message_bytes: int,
        max_adapters_per_request: int = DEFAULT_MAX_ADAPTERS_PER_REQUEST,
    ) -> Upstream:
        """An upstream that calls the scheduler over `channel`."""
        scheduler = scheduler_pb2_grpc.SchedulerStub(channel)
        return cls(
            scheduler,
            registry,
            tenancy,
            inline_limit,
            max_message_bytes,
            max_adapters_per_request,
            JobLink(scheduler, link_error),
        )

    async def aclose(self) -> None:
        """End the link's stream (at shutdown, before the channel closes)."""
        if self.link is not None:
            await self.link.aclose()

    async def submit(
        self, request: common_pb2.GenerateRequest, caller: Caller, deadline_ms: int
    ) -> gateway_pb2.JobHandle:
        """Submit for an authenticated, admitted caller; scheduler errors raise MeshError."""
        self._refuse_while_lost()
        async with mesh_errors():
            return await self.scheduler.Submit(
                submit_request(request, caller, deadline_ms),
                timeout=SUBMIT_TIMEOUT_S,
                metadata=caller.trace_metadata or None,
            )

    async def submit_and_watch(
        self,
        request: common_pb2.GenerateRequest,
        caller: Caller,
        deadline_ms: int,
        final_only: bool = False,
        cancel_when_left: bool = False,
    ) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        """Submit, then the job's events to its end, as callers get them; scheduler errors
        (Submit's among them) raise MeshError. With `final_only`, the job's state when queued
        (naming the job) and then its final event alone. With `cancel_when_left`, closing this
        before the final event over the link cancels the job, even before its first event has
        named it; a job on a call of its own (`_suits_link`) runs on, for the caller to cancel
        by its id."""
        self._refuse_while_lost()
        submit = submit_request(request, caller, deadline_ms)
        submit.final_only = final_only
        link = self.link
        if link is not None and not link.unsupported() and _suits_link(request, final_only):
            trace = dict(caller.trace_metadata or ())
            followed = False
            try:
                async for event in link.follow(submit, trace, cancel_when_left):
                    followed = True
                    yield self.outbound(event)
                return
            except MeshError as exc:
                # Refused before the scheduler read the job (it has no JobLink): no job was
                # made, so the same submission goes on a call of its own. Only this
                # exchange's own refusal says so: another error may follow an admitted job.
                if followed or exc.code is not StatusCode.UNIMPLEMENTED:
                    raise
                _log_no_link()
        call = self.scheduler.SubmitAndWatch(submit, metadata=caller.trace_metadata or None)
        try:
            async with mesh_errors():
                async for event in call:
                    if event.WhichOneof("event") in FINAL_EVENTS:
                        await _ended(call)
                    yield self.outbound(event)
        finally:
            call.cancel()

    def _refuse_while_lost(self) -> None:
        """UNAVAILABLE at once for a new job while the scheduler is lost: a scheduler that
        holds its connections but answers nothing (stopped, swapping) would keep the call
        until its deadline and then leave the caller unable to tell whether a job was made.
        Sent nothing, it made none, so a retry is safe; but a scheduler that refuses the
        gateway's credential is named as such, as every other call names it: no retry
        helps until an operator fixes the config."""
        if self.scheduler_lost():
            message = REFUSED_MESSAGE if self.scheduler_refuses else UNREACHABLE_MESSAGE
            raise MeshError(message, code=StatusCode.UNAVAILABLE)

    def heard_from_probe(self, error: grpc.aio.AioRpcError | None) -> None:
        """What the gateway's scheduler probe last got: None for an answer, else the call's
        error. A refusal of the gateway's credential is logged as an ERROR at once
        (`outward`, at most once a minute), even while callers only send new jobs, which
        the gateway refuses without a call once it counts the scheduler lost."""
        self.scheduler_refuses = error is not None and error.code() in _REFUSALS
        if error is not None and self.scheduler_refuses:
            outward(error)

    def outbound(self, event: common_pb2.GenerateEvent) -> common_pb2.GenerateEvent:
        """`event` as a caller gets it: a result above `inline_limit` becomes a reference."""
        if event.HasField("result") and len(event.result.data) > self.inline_limit:
            # Too large for one message to this caller: send a reference instead.
            size = len(event.result.data)
            event.result.ClearField("data")
            event.result.artifact.size_bytes = size
        return event

    async def upload(
        self, chunks: AsyncIterator[gateway_pb2.UploadChunk], caller: Caller
    ) -> gateway_pb2.UploadHandle:
        """Forwards an upload's chunks to the scheduler, each scoped to the caller's tenant;
        scheduler errors raise grpc.aio.AioRpcError.

        The caller's stream is read here, not by the outgoing call: a chunk that fails its
        checks then ends this call with its error instead of stalling the outgoing stream.
        """
        call = self.scheduler.Upload(timeout=UPLOAD_TIMEOUT_S)
        try:
            try:
                async for chunk in chunks:
                    scoped_chunk = scheduler_pb2.ScopedUploadChunk(
                        chunk=chunk, tenant=caller.tenant
                    )
                    await call.write(scoped_chunk)
                await call.done_writing()
            except asyncio.InvalidStateError:
                pass  # the scheduler answered (an error) before the end: awaiting it raises that
            handle: gateway_pb2.UploadHandle = await call
            return handle
        finally:
            call.cancel()  # nothing once the call is done; else the scheduler drops the upload


def submit_request(
    request: common_pb2.GenerateRequest, caller: Caller, deadline_ms: int
) -> scheduler_pb2.SubmitRequest:
    """`request` as the scheduler takes it: with the caller's tenant, quota and deadline."""
    return scheduler_pb2.SubmitRequest(
        request=request,
        tenant=caller.tenant,
        deadline_unix_ms=deadline_ms,
        tenant_weight=caller.quota.weight,
        max_queued_jobs=caller.quota.max_queued_jobs,
        max_running_jobs=caller.quota.max_concurrent_jobs,
        result_quota_bytes=caller.quota.result_quota_bytes,
    )


def scoped(job_id: str, caller: Caller, offset: int = 0) -> scheduler_pb2.ScopedJobRequest:
    """A job request as the scheduler scopes it: the caller's tenant, and its admin scope."""
    return scheduler_pb2.ScopedJobRequest(
        job_id=job_id, tenant=caller.tenant, admin=caller.admin, offset=offset
    )


def call_deadline_ms(
    timeout_ms: int | None,
    context: grpc.aio.ServicerContext[Any, Any] | None,
    follows_job: bool = True,
) -> int:
    """The earlier of a request's own timeout and the call's gRPC deadline, as Unix ms (0: none).

    The call's deadline counts only for calls that follow the job to its end (Generate,
    ModelInfer, a stream): a client's timeout on Submit bounds the wait for the job id,
    not the job itself.
    """
    now = time.time()
    candidates = []
    if timeout_ms:
        candidates.append(now + timeout_ms / 1000)
    remaining = context.time_remaining() if follows_job and context is not None else None
    if remaining is not None:
        candidates.append(now + remaining)
    return int(min(candidates) * 1000) if candidates else 0


def caller_of(tenancy: Tenancy, context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
    """The caller that the `authorization` metadata authenticates; UNAUTHENTICATED if none does."""
    metadata = dict(context.invocation_metadata() or ())
    return with_trace(key_check(tenancy)(metadata), metadata)


def key_check(tenancy: Tenancy) -> Callable[[Mapping[str, str | bytes]], Caller]:
    """The caller a call's metadata authenticates by its `authorization`; UNAUTHENTICATED
    if none does. The public listener runs it on every call before reading its request
    (`Registration.authenticate`); the servicers again, for the caller."""

    def check(metadata: Mapping[str, str | bytes]) -> Caller:
        authorization = metadata.get("authorization")
        # Only keys ending in "-bin" carry bytes.
        return tenancy.authenticate(authorization if isinstance(authorization, str) else None)

    return check


def with_trace(caller: Caller, headers: Mapping[str, str | bytes]) -> Caller:
    """`caller` carrying the trace context its request came with, to forward upstream."""
    trace_metadata = forwarded_trace(headers)
    return replace(caller, trace_metadata=trace_metadata) if trace_metadata else caller


def reader_of(tenancy: Tenancy, context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
    """The caller of a call that makes no job, charged to its tenant's read budget."""
    caller = caller_of(tenancy, context)
    tenancy.check_read(caller)
    return caller


# What callers get instead of the scheduler's refusal of the gateway's own credential: theirs
# was fine, and the scheduler's wording names the internal header.
REFUSED_MESSAGE = (
    "the mesh is misconfigured: the scheduler refused the gateway's credentials; "
    "see the gateway's log"
)
# What callers get instead of gRPC's account of a failed connection, which names the
# scheduler's internal address.
UNREACHABLE_MESSAGE = "the scheduler is unreachable; retry"
_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# gRPC's own wording when the scheduler never answered (no connection, or one that broke).
# An UNAVAILABLE the scheduler itself sends ("the job store cannot take new jobs") says none
# of this and reaches callers as it is.
_NO_ANSWER = re.compile(
    r"failed to connect|socket closed|connection reset|broken pipe|goaway|keepalive watchdog|"
    r"dns resolution failed|empty address list|cancelling all calls|ipv4:|ipv6:|unix:",
    re.IGNORECASE,
)


# Module-wide: relay_errors and mesh_errors wrap calls wherever the gateway makes them.
throttle = LogThrottle(LOG_EVERY_S)


def outward(exc: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str] | None:
    """The status and message a caller gets in place of a scheduler error that describes the
    mesh's insides (the gateway's credential refused, the scheduler not reachable), logged
    here in full; None for any other error, which callers get as it is."""
    code, details = exc.code(), exc.details() or ""
    if code in _REFUSALS:
        if throttle.due("refused"):
            log.error(
                "the scheduler (gateway.scheduler_address) refused the gateway's internal "
                "credential: %s: %s. Its internal_auth token (token or token_file) must be the "
                "scheduler's, and with internal_tls its cert_file must be signed by the "
                "scheduler's ca_file; until then every caller gets UNAVAILABLE "
                "(logged at most once every %.0f s)",
                code.name,
                details,
                throttle.every_s,
            )
        return grpc.StatusCode.UNAVAILABLE, REFUSED_MESSAGE
    if code == grpc.StatusCode.UNAVAILABLE and _NO_ANSWER.search(details):
        if throttle.due("unreachable"):
            log.warning(
                "the scheduler (gateway.scheduler_address) is unreachable: %s. If it is up, "
                "check that internal_tls matches it (a certificate it refuses looks like this); "
                "callers get %r (logged at most once every %.0f s)",
                details,
                UNREACHABLE_MESSAGE,
                throttle.every_s,
            )
        return grpc.StatusCode.UNAVAILABLE, UNREACHABLE_MESSAGE
    return None


@contextlib.asynccontextmanager
async def relay_errors(context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
    """Pass the scheduler's status, message and retry hint through to the caller, except what
    `outward` rewords."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        trailing = tuple(
            (k, v)
            for k, v in (exc.trailing_metadata() or ())
            if k in (RETRY_AFTER_KEY, PUSHBACK_KEY)
        )
        code, details = outward(exc) or (exc.code(), exc.details() or "")
        await context.abort(code, details, trailing)


# How gRPC core words a message refused for its size on the receiving channel.
_OVERSIZED = "Received message larger than max"


@contextlib.asynccontextmanager
async def mesh_errors() -> AsyncIterator[None]:
    """Turn a scheduler status into a MeshError, keeping its code, message and retry hint,
    except what `outward` rewords."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        raise mesh_error(exc) from None


def mesh_error(exc: grpc.aio.AioRpcError) -> MeshError:
    """A scheduler call's failure as callers get it (see `mesh_errors`)."""
    retry_ms = next((v for k, v in (exc.trailing_metadata() or ()) if k == RETRY_AFTER_KEY), "0")
    reworded = outward(exc)
    if reworded is not None:
        return MeshError(reworded[1], code=from_grpc(reworded[0]))
    code = from_grpc(exc.code())
    details = exc.details() or ""
    if code is StatusCode.UNIMPLEMENTED:
        # Every call the gateway makes is one the scheduler of its own version serves.
        return MeshError(
            f"the scheduler does not serve this call ({details or code}): it is older than "
            "this gateway; upgrade the scheduler first",
            code=code,
        )
    if code is StatusCode.RESOURCE_EXHAUSTED and _OVERSIZED in details:
        # The gateway's own channel refused an answer above its message limit: a
        # configuration to fix, not a load to wait out (RESOURCE_EXHAUSTED would be a 429).
        return MeshError(
            f"the scheduler's answer is larger than gateway.max_message_bytes allows "
            f"({details}); raise gateway.max_message_bytes",
            code=StatusCode.INTERNAL,
        )
    return MeshError(details or code, code=code, retry_after_s=int(retry_ms) / 1000)


def link_error(exc: grpc.aio.AioRpcError | None) -> MeshError:
    """What the open exchanges of a JobLink stream end with when it breaks: its call's
    failure, as any call's; a stream the scheduler ended itself, as one unreachable."""
    if exc is None:
        return MeshError(UNREACHABLE_MESSAGE, code=StatusCode.UNAVAILABLE)
    return mesh_error(exc)


# Longest wait for the stream's end after its final event; past it the call is cancelled.
_END_WAIT_S = 1.0


def _log_no_link() -> None:
    log.warning(
        "the scheduler answers JobLink UNIMPLEMENTED: it is older than this gateway (a rolling "
        "upgrade in progress?); jobs go on calls of their own. Upgrade the scheduler first: "
        "an older one also ignores settings it does not know, such as result_quota_bytes"
    )


def _suits_link(request: common_pb2.GenerateRequest, final_only: bool) -> bool:
    """Whether a job goes over the link's shared stream, where a few small messages cost less
    than a call of its own. Not a job with large inline inputs (LINK_MAX_INPUT_BYTES), nor
    one that asks for latent previews: images, which a call keeps under its own flow
    control, so that a caller slow to read them holds them back at the scheduler instead of
    in the gateway's memory."""
    if len(request.image) + len(request.mask_image) > LINK_MAX_INPUT_BYTES:
        return False
    return final_only or not request.preview_every_steps


async def replayed(
    first: common_pb2.GenerateEvent, rest: AsyncGenerator[common_pb2.GenerateEvent, None]
) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
    """`first` again, then the rest of its stream; closing this closes that stream."""
    try:
        yield first
        async for event in rest:
            yield event
    finally:
        await rest.aclose()


async def _ended(call: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
    """Wait for the call's status, which follows its final event at once. A caller that
    stops reading at the final event (a KServe call) would otherwise have the call
    cancelled while open: a stream reset for both ends, about 5% of the gateway's CPU
    under load."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_END_WAIT_S):
            await call.code()
