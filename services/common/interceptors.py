"""Server interceptors: internal credential, metrics, and domain errors to status codes; and
a public API's credential and concurrency, checked before a request is read."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeAlias, cast

import grpc

from mediamesh.common.api.status import from_grpc, to_grpc
from mediamesh.common.errors import (
    PUSHBACK_KEY,
    RETRY_AFTER_KEY,
    MeshError,
    ResourceExhausted,
    StatusCode,
    retry_after_ms,
)
from mediamesh.common.log_throttle import LogThrottle
from mediamesh.common.metrics import RPC_LATENCY, RPC_REQUESTS
from mediamesh.common.telemetry import record_unanswered_call

log = logging.getLogger(__name__)

INTERNAL_TOKEN_KEY = "x-mediamesh-token"
# Probes (the kubelet's, load balancers') send no credential. Reflection is not open: it
# describes the whole internal API, so grpcurl needs `-H 'x-mediamesh-token: ...'` there.
_HEALTH_PREFIX = "/grpc.health.v1.Health/"
# How long a client stream refused for its credential is read before the refusal is sent.
DRAIN_BEFORE_REFUSAL_S = 5.0
# How long an admitted call holds its place before its handler runs (gRPC reading its
# request): a request sent at all arrives well within it, and a caller that leaves before
# sending one frees its place by then.
ADMISSION_HOLD_S = 5.0

# The interceptor serves every service, so requests and responses are of any message type.
# (Quoted: grpc's classes are generic only in their type stubs.)
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# typeshed types a handler's behaviours for the threaded server; under grpc.aio they are
# coroutine functions and async generators that take an aio ServicerContext.
_UnaryBehaviour: TypeAlias = "Callable[[Any, Context], Awaitable[Any]]"
_StreamBehaviour: TypeAlias = "Callable[[Any, Context], AsyncIterator[Any] | Awaitable[None]]"


# A call's metadata by key (values of "-bin" keys are bytes).
Metadata: TypeAlias = Mapping[str, "str | bytes"]
# Checks a call's credential from its metadata; raises MeshError (UNAUTHENTICATED) to refuse.
CredentialCheck: TypeAlias = Callable[[Metadata], object]


def _split(method: str) -> tuple[str, str]:
    _, service, name = method.split("/", 2) if method.count("/") >= 2 else ("", "", method)
    return service, name


async def _abort_for(exc: BaseException, context: Context) -> None:
    if isinstance(exc, MeshError):
        trailing: tuple[tuple[str, str], ...] = ()
        if exc.retry_after_s:
            wait_ms = str(retry_after_ms(exc.retry_after_s))
            trailing = ((RETRY_AFTER_KEY, wait_ms), (PUSHBACK_KEY, wait_ms))
        await context.abort(to_grpc(exc.code), exc.message, trailing)
    log.exception("unexpected error in %s", context)
    await context.abort(to_grpc(StatusCode.INTERNAL), "internal error; see the service log")


def _code_of(context: Context, cancelled: bool) -> StatusCode:
    """The call's status code, as its client saw it.

    A call its client cancels, or whose deadline passes, ends the handler with
    CancelledError before any status is set: without this it would count as OK, and the
    error panels would never show a timeout or a client that went away."""
    # typeshed says a status is always set; under grpc.aio it is None until one is.
    code: grpc.StatusCode | None = context.code()
    if code is None and cancelled:
        remaining = context.time_remaining()
        return (
            StatusCode.DEADLINE_EXCEEDED
            if remaining is not None and remaining <= 0
            else StatusCode.CANCELLED
        )
    return from_grpc(code)


def _record_in_span(context: Context) -> None:
    """A cancelled call's code in the tracing SERVER span around this interceptor, when the
    handler set none (see `_code_of` and `telemetry.record_unanswered_call`)."""
    if context.code() is None:
        code = _code_of(context, cancelled=True)
        record_unanswered_call(code, to_grpc(code).value[0])


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Checks the internal token (when set), records metrics and maps MeshError to status;
    with a `CallerGate`, also admits calls to a public API before their request is read."""

    def __init__(
        self, internal_token: str | None = None, callers: CallerGate | None = None
    ) -> None:
        self._token = internal_token
        self._callers = callers
        # A wrong token fails every call its holder makes; one line a minute says so without
        # letting a scanner fill the log.
        self._refusal_log = LogThrottle()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        service, name = _split(method)
        gate = self._callers
        counter: CallerGate | None = None
        if gate is not None and gate.admits_by_metadata(service, name):
            refusal = gate.refusal(service, details)
            if refusal is not None:
                # Wrapped like any call, so that refusals are counted and timed too.
                handler = _refusal(refusal, bool(handler.request_streaming))
            elif gate.max_calls is not None:
                counter = gate
                gate.admitted()
        authorised = self._authorised(method, details)
        if not authorised:
            self._log_refusal(method)
        return _wrap(handler, service, name, authorised, counter)

    def _authorised(self, method: str, details: grpc.HandlerCallDetails) -> bool:
        if self._token is None:
            return True
        sent = dict(details.invocation_metadata or ()).get(INTERNAL_TOKEN_KEY)
        if sent is None:
            return method.startswith(_HEALTH_PREFIX)
        # Health too refuses a wrong token: only mesh services send one, and the gateway's
        # readiness asks Health with its token, so a gateway holding the wrong one turns
        # NOT_SERVING instead of passing its probe while the scheduler refuses its calls.
        return hmac.compare_digest(str(sent), self._token)

    def _log_refusal(self, method: str) -> None:
        if not self._refusal_log.due():
            return
        log.warning(
            "refused a call to %s: missing or wrong %s; a mesh service calling here needs "
            "this service's internal_auth token (logged at most once every %.0f s)",
            method,
            INTERNAL_TOKEN_KEY,
            self._refusal_log.every_s,
        )


async def _drain(requests: AsyncIterator[Any]) -> None:
    """Read a refused client stream to its end, for at most DRAIN_BEFORE_REFUSAL_S."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_BEFORE_REFUSAL_S):
            async for _ in requests:
                pass


def _wrap(
    handler: Handler,
    service: str,
    name: str,
    authorised: bool,
    counter: CallerGate | None = None,
) -> Handler:
    """`handler` with the credential check, metrics and error mapping around it, and, with
    a `counter`, counted in `counter.active` while it runs (one layer for all of it: every
    call and every streamed message passes through here)."""

    async def check(context: Context, requests: AsyncIterator[Any] | None = None) -> None:
        if not authorised:
            if requests is not None:
                # An asyncio client still writing when the refusal arrives reports INTERNAL
                # instead of it (grpc/grpc#36066): a gateway relaying an upload with a wrong
                # token told its caller "internal error" rather than that its credential
                # was refused. So the stream is read first, for a bounded time.
                await _drain(requests)
            await context.abort(
                to_grpc(StatusCode.UNAUTHENTICATED),
                f"missing or wrong {INTERNAL_TOKEN_KEY} metadata (internal service)",
            )

    def record(start: float, context: Context, cancelled: bool) -> None:
        RPC_REQUESTS.labels(service, name, _code_of(context, cancelled)).inc()
        RPC_LATENCY.labels(service, name).observe(time.perf_counter() - start)

    if handler.unary_unary or handler.stream_unary:
        inner = cast(_UnaryBehaviour, handler.unary_unary or handler.stream_unary)

        async def unary(request: Any, context: Context) -> Any:
            start, cancelled = time.perf_counter(), False
            if counter is not None:
                counter.started()
            try:
                await check(context, request if handler.stream_unary else None)
                return await inner(request, context)
            except asyncio.CancelledError:
                cancelled = True
                _record_in_span(context)
                raise
            except Exception as exc:
                if context.code() is None:
                    await _abort_for(exc, context)
                raise
            finally:
                if counter is not None:
                    counter.ended()
                record(start, context, cancelled)

        factory = (
            grpc.unary_unary_rpc_method_handler
            if handler.unary_unary
            else grpc.stream_unary_rpc_method_handler
        )
        return factory(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    inner_stream = cast(_StreamBehaviour, handler.unary_stream or handler.stream_stream)

    async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
        start, cancelled = time.perf_counter(), False
        if counter is not None:
            counter.started()
        try:
            await check(context)
            answers = inner_stream(request, context)
            if inspect.isawaitable(answers):
                # A handler that writes its answers with `context.write` (grpcio-health's
                # Watch) is a coroutine, not an async generator.
                await answers
            else:
                async for item in answers:
                    yield item
        except asyncio.CancelledError:
            cancelled = True
            _record_in_span(context)
            raise
        except Exception as exc:
            if context.code() is None:
                await _abort_for(exc, context)
            raise
        finally:
            if counter is not None:
                counter.ended()
            record(start, context, cancelled)

    factory = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream
        else grpc.stream_stream_rpc_method_handler
    )
    return factory(
        streaming,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class CallerGate:
    """Admits a call to a listener's own services from its metadata alone, before its request
    is read: the caller's credential (a public API's key) and room under `max_calls`.

    The servicers authenticate too, but only once gRPC has read the request and parsed it,
    and `lenient` has checked its bounds: an anonymous caller could make the server hold and
    walk up to the receive limit per call. A refused call is answered by a handler that never
    reads a unary request, and reads a streamed one for at most DRAIN_BEFORE_REFUSAL_S
    without parsing it (as `_wrap` does): nothing it sent is parsed.

    `checks` maps each service's full name to its credential check (None: none); calls to
    any other service (health, reflection) pass untouched and uncounted, so that probes are
    answered however busy the listener is, which gRPC's own `maximum_concurrent_rpcs` would
    refuse too. `open_methods` ("service/method", a liveness probe's) pass the same way.
    `ServiceInterceptor` applies it, in the one layer that wraps every call."""

    def __init__(
        self,
        checks: Mapping[str, CredentialCheck | None],
        open_methods: frozenset[str] = frozenset(),
        max_calls: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checks = dict(checks)
        self._open = open_methods
        self.max_calls = max_calls
        self._clock = clock
        # Calls admitted whose handler is running.
        self.active = 0
        # When each call admitted but not yet running was admitted: gRPC reads a unary
        # request before the handler runs, and a burst arrives before any of it has, so
        # these count against the bound too. A call whose request never comes (its client
        # left) never runs, so its place is given back after ADMISSION_HOLD_S.
        self._admitted: collections.deque[float] = collections.deque()

    def admits_by_metadata(self, service: str, name: str) -> bool:
        """Whether calls to this method go through the gate."""
        return service in self._checks and f"{service}/{name}" not in self._open

    def refusal(self, service: str, details: grpc.HandlerCallDetails) -> MeshError | None:
        """Why a call to `service` is refused before its request is read, or None."""
        check = self._checks[service]
        if check is not None:
            try:
                check(dict(details.invocation_metadata or ()))
            except MeshError as exc:
                return exc
        in_progress = self.in_progress() if self.max_calls is not None else 0
        if self.max_calls is not None and in_progress >= self.max_calls:
            return ResourceExhausted(
                f"max_concurrent_rpcs: {in_progress} calls in progress, the most this "
                "listener serves at once; retry later",
                retry_after_s=1,
            )
        return None

    def in_progress(self) -> int:
        """Calls running, and admitted within ADMISSION_HOLD_S but not running yet."""
        held_since = self._clock() - ADMISSION_HOLD_S
        while self._admitted and self._admitted[0] < held_since:
            self._admitted.popleft()
        return self.active + len(self._admitted)

    def admitted(self) -> None:
        """A call passed the gate; it counts from now."""
        self._admitted.append(self._clock())

    def started(self) -> None:
        """An admitted call's handler runs: it counts as running, no longer as admitted."""
        if self._admitted:
            self._admitted.popleft()
        self.active += 1

    def ended(self) -> None:
        self.active -= 1


def _unread(data: bytes) -> None:
    """The deserializer of a refused call: what it sent is dropped, never parsed."""
    return None


def _refusal(error: MeshError, streamed: bool) -> Handler:
    """A handler answering `error` at once (with its retry hint). It takes the request as a
    stream, whatever the method's shape, so that gRPC does not read a unary request before
    it runs: the status is all the caller gets, and clients of any shape read it as the
    call's end."""

    async def refuse(requests: AsyncIterator[Any], context: Context) -> None:
        if streamed:
            # As `_wrap` does for a refused internal stream (grpc/grpc#36066).
            await _drain(requests)
        await _abort_for(error, context)

    return grpc.stream_unary_rpc_method_handler(refuse, request_deserializer=_unread)
