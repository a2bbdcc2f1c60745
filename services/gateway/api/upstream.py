"""The gateway's link to the scheduler, shared by the native and the KServe v2 APIs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from mediamesh.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc

from services.common.errors import RETRY_AFTER_KEY
from services.common.registry import Registry
from services.gateway.core.tenancy import Caller, Tenancy


@dataclass
class Upstream:
    scheduler: scheduler_pb2_grpc.SchedulerStub
    registry: Registry
    tenancy: Tenancy
    inline_limit: int

    async def watch(
        self, job_id: str, tenant: str, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        request = scheduler_pb2.ScopedJobRequest(job_id=job_id, tenant=tenant)
        async with relay_errors(context):
            async for event in self.scheduler.Watch(request):
                if event.HasField("result") and len(event.result.data) > self.inline_limit:
                    # Too large for one message to this caller: send a reference instead.
                    size = len(event.result.data)
                    event.result.ClearField("data")
                    event.result.artifact.size_bytes = size
                yield event

    async def download(
        self, job_id: str, tenant: str, offset: int, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        request = scheduler_pb2.ScopedJobRequest(job_id=job_id, tenant=tenant, offset=offset)
        async with relay_errors(context):
            async for chunk in self.scheduler.Download(request):
                yield chunk


def caller_of(tenancy: Tenancy, context: grpc.aio.ServicerContext) -> Caller:
    metadata = dict(context.invocation_metadata() or ())
    return tenancy.authenticate(metadata.get("authorization"))


@contextlib.asynccontextmanager
async def relay_errors(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """Pass the scheduler's status, message and retry hint through to the caller unchanged."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        trailing = tuple((k, v) for k, v in (exc.trailing_metadata() or ()) if k == RETRY_AFTER_KEY)
        await context.abort(exc.code(), exc.details() or "", trailing)
