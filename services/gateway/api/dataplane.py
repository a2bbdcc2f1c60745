"""The gateway's transport-neutral operations, shared by its gRPC servicers and its HTTP face.

Each operation authenticates through the tenancy, charges the caller's quota, validates the
request against the registry and calls the scheduler; failures raise `MeshError` with a
transport-neutral code that each transport maps once (gRPC in `common.api.status`, HTTP in
`common.http_status`). Like KServe's DataPlane, it knows no transport: the gRPC servicers
pass it the `authorization` metadata, the HTTP face the `Authorization` header.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager

from mediamesh.common.api.requests import request_fields
from mediamesh.common.errors import MeshError
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2
from mediamesh.common.params import find_model, parse_priority, resolve
from mediamesh.gateway import metrics
from mediamesh.gateway.api.upstream import Upstream, mesh_errors, scoped
from mediamesh.gateway.core.tenancy import Caller

# Seconds a unary scheduler call (GetJob, ListJobs, Cancel, DeleteJob, ListModels) may take.
UNARY_TIMEOUT_S = 10
# The request field the scheduler's refusals for lack of time start with: the job's own limit.
TIMEOUT_FIELD = "timeout_ms"


class DataPlane:
    """Tenancy, quotas, validation and the scheduler calls behind every public transport."""

    def __init__(self, upstream: Upstream) -> None:
        self.up = upstream
        metrics.init_refusals(spec.modality for spec in upstream.registry.models)

    @property
    def inline_limit(self) -> int:
        """The largest result a Watch event carries inline."""
        return self.up.inline_limit

    def caller(self, authorization: str | None) -> Caller:
        """The caller an `authorization` value (`Bearer <key>`) names; UNAUTHENTICATED if none."""
        return self.up.tenancy.authenticate(authorization)

    def reader(self, authorization: str | None) -> Caller:
        """The caller of a call that makes no job, charged one token of its read budget."""
        caller = self.caller(authorization)
        self.up.tenancy.check_read(caller)
        return caller

    async def submit(
        self,
        request: common_pb2.GenerateRequest,
        caller: Caller,
        call_deadline_s: float | None = None,
    ) -> gateway_pb2.JobHandle:
        """Validates and admits `request` for `caller`, then submits it to the scheduler.

        `call_deadline_s` is the remaining time of a call that follows the job to its end
        (None: the job is bounded only by its own `timeout_ms`).
        """
        deadline, set_by_call = self._admit(request, caller, call_deadline_s)
        with _naming_the_call_deadline(set_by_call):
            return await self.up.submit(request, caller, deadline)

    def generate(
        self, request: common_pb2.GenerateRequest, caller: Caller, call_deadline_s: float | None
    ) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        """`submit`, then the job's events to its end (as `watch` gives them), through one
        scheduler call instead of two."""
        return self._submitted(request, caller, call_deadline_s)

    def follow(
        self, request: common_pb2.GenerateRequest, caller: Caller
    ) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        """`submit`, then the job's final event, through one exchange with the scheduler: the
        job's state as queued (naming it), then its final event. Closing this before the
        final event cancels the job (on the link; a job on a call of its own runs on)."""
        return self._submitted(request, caller, None, final_only=True, cancel_when_left=True)

    async def _submitted(
        self,
        request: common_pb2.GenerateRequest,
        caller: Caller,
        call_deadline_s: float | None,
        final_only: bool = False,
        cancel_when_left: bool = False,
    ) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        """Admits `request` and submits it, then yields the job's events
        (`Upstream.submit_and_watch`); closing this closes that stream at once."""
        deadline, set_by_call = self._admit(request, caller, call_deadline_s)
        with _naming_the_call_deadline(set_by_call):
            events = self.up.submit_and_watch(
                request, caller, deadline, final_only=final_only, cancel_when_left=cancel_when_left
            )
            try:
                async for event in events:
                    yield event
            finally:
                await events.aclose()

    def _admit(
        self, request: common_pb2.GenerateRequest, caller: Caller, call_deadline_s: float | None
    ) -> tuple[int, bool]:
        """Checks `request` and charges `caller`'s quota for it; its deadline as Unix ms, and
        whether the call's deadline set it (rather than `timeout_ms`)."""
        fields = request_fields(request)
        try:
            spec = find_model(self.up.registry, fields.model)
            priority = parse_priority(fields.priority)
            # Reject bad input here, before it costs the scheduler anything.
            resolve(spec, fields, max_adapters=self.up.max_adapters_per_request)
            self.up.tenancy.admit(caller, spec.name, priority)
        except MeshError as exc:
            # The scheduler never hears of these, so its own refusal counter cannot count them.
            metrics.count_refused(exc, metrics.queue_of(self.up.registry, fields.model))
            raise
        return job_deadline(fields.timeout_ms, call_deadline_s)

    async def job(self, job_id: str, caller: Caller) -> common_pb2.JobInfo:
        """The state of one of the caller's jobs; NOT_FOUND for another tenant's."""
        async with mesh_errors():
            return await self.up.scheduler.GetJob(scoped(job_id, caller), timeout=UNARY_TIMEOUT_S)

    async def jobs(
        self, query: gateway_pb2.ListJobsRequest, caller: Caller
    ) -> gateway_pb2.ListJobsResponse:
        """A page of the caller's jobs (every tenant's for an admin key)."""
        request = scheduler_pb2.ScopedListJobsRequest(
            query=query, tenant=caller.tenant, admin=caller.admin
        )
        async with mesh_errors():
            return await self.up.scheduler.ListJobs(request, timeout=UNARY_TIMEOUT_S)

    async def cancel(self, job_id: str, caller: Caller) -> common_pb2.JobInfo:
        """Cancels one of the caller's jobs; answers with its state after cancelling."""
        async with mesh_errors():
            return await self.up.scheduler.Cancel(scoped(job_id, caller), timeout=UNARY_TIMEOUT_S)

    async def delete(self, job_id: str, caller: Caller) -> common_pb2.DeletedJob:
        """Deletes one of the caller's ended jobs with its result; FAILED_PRECONDITION for a
        job that has not ended, NOT_FOUND for another tenant's."""
        async with mesh_errors():
            return await self.up.scheduler.DeleteJob(
                scoped(job_id, caller), timeout=UNARY_TIMEOUT_S
            )

    async def models(self) -> gateway_pb2.ListModelsResponse:
        """The models the mesh serves and whether each is ready."""
        async with mesh_errors():
            return await self.up.scheduler.ListModels(
                gateway_pb2.ListModelsRequest(), timeout=UNARY_TIMEOUT_S
            )

    async def watch(
        self, job_id: str, caller: Caller, final_only: bool = False
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """The job's events from its current state to its end (its final event alone with
        `final_only`); a result above the inline limit comes as an artifact reference (fetch
        it with `download`)."""
        request = scoped(job_id, caller)
        request.final_only = final_only
        async with mesh_errors():
            async for event in self.up.scheduler.Watch(request):
                yield self.up.outbound(event)

    async def download(
        self, job_id: str, caller: Caller, offset: int = 0
    ) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        """The chunks of the job's artifact from byte `offset`."""
        async with mesh_errors():
            async for chunk in self.up.scheduler.Download(scoped(job_id, caller, offset)):
                yield chunk


def job_deadline(timeout_ms: int | None, call_deadline_s: float | None) -> tuple[int, bool]:
    """The earlier of a request's own timeout and a call's remaining time, as Unix ms (0: none),
    and whether it is the call's."""
    now = time.time()
    own = now + timeout_ms / 1000 if timeout_ms else None
    call = now + call_deadline_s if call_deadline_s is not None else None
    if call is not None and (own is None or call < own):
        return int(call * 1000), True
    return (int(own * 1000), False) if own is not None else (0, False)


@contextmanager
def _naming_the_call_deadline(set_by_call: bool) -> Iterator[None]:
    """A refusal for lack of time names the call's gRPC deadline when that, not `timeout_ms`,
    set the job's: the scheduler only sees a deadline, and names `timeout_ms`, which the
    caller may not have set at all (nor would a larger one help)."""
    try:
        yield
    except MeshError as error:
        head, colon, rest = error.message.partition(":")
        if set_by_call and colon and head == TIMEOUT_FIELD:
            error.message = (
                f"the call's gRPC deadline (the job's, being sooner than any {head}){colon}{rest}"
            )
            error.args = (error.message,)
        raise
