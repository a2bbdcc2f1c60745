"""mediamesh.v1.Gateway: authenticate, validate, then forward to the scheduler."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
from mediamesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, scheduler_pb2

from services.common.params import find_model, parse_priority, resolve
from services.gateway.api.upstream import Upstream, caller_of, relay_errors
from services.scheduler.api import convert


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, upstream: Upstream) -> None:
        self.up = upstream

    async def submit(
        self, request: common_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> tuple[gateway_pb2.JobHandle, str]:
        caller = caller_of(self.up.tenancy, context)
        fields = convert.request_fields(request)
        spec = find_model(self.up.registry, fields.model)
        priority = parse_priority(fields.priority)
        resolve(spec, fields)  # reject bad input here, before it costs the scheduler anything
        self.up.tenancy.admit(caller, spec.name, priority)
        deadline_ms = _deadline_ms(request, context)
        submit = scheduler_pb2.SubmitRequest(
            request=request,
            tenant=caller.tenant,
            deadline_unix_ms=deadline_ms,
            tenant_weight=caller.quota.weight,
            max_queued_jobs=caller.quota.max_queued_jobs,
            max_running_jobs=caller.quota.max_concurrent_jobs,
        )
        async with relay_errors(context):
            handle = await self.up.scheduler.Submit(submit, timeout=30)
        return handle, caller.tenant

    async def Generate(
        self, request: common_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        handle, tenant = await self.submit(request, context)
        async for event in self.up.watch(handle.job_id, tenant, context):
            yield event

    async def Submit(
        self, request: common_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.JobHandle:
        handle, _ = await self.submit(request, context)
        return handle

    async def Watch(
        self, request: gateway_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        caller = caller_of(self.up.tenancy, context)
        async for event in self.up.watch(request.job_id, caller.tenant, context):
            yield event

    async def Cancel(
        self, request: gateway_pb2.CancelRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.JobInfo:
        caller = caller_of(self.up.tenancy, context)
        async with relay_errors(context):
            return await self.up.scheduler.Cancel(
                scheduler_pb2.ScopedJobRequest(job_id=request.job_id, tenant=caller.tenant),
                timeout=10,
            )

    async def GetJob(
        self, request: gateway_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.JobInfo:
        caller = caller_of(self.up.tenancy, context)
        async with relay_errors(context):
            return await self.up.scheduler.GetJob(
                scheduler_pb2.ScopedJobRequest(job_id=request.job_id, tenant=caller.tenant),
                timeout=10,
            )

    async def ListModels(
        self, request: gateway_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListModelsResponse:
        caller_of(self.up.tenancy, context)
        async with relay_errors(context):
            return await self.up.scheduler.ListModels(request, timeout=10)

    async def Download(
        self, request: gateway_pb2.DownloadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        caller = caller_of(self.up.tenancy, context)
        async for chunk in self.up.download(request.job_id, caller.tenant, request.offset, context):
            yield chunk


def _deadline_ms(request: common_pb2.GenerateRequest, context: grpc.aio.ServicerContext) -> int:
    """The earlier of the request's timeout_ms and the call's own gRPC deadline."""
    now = time.time()
    candidates = []
    if request.HasField("timeout_ms") and request.timeout_ms > 0:
        candidates.append(now + request.timeout_ms / 1000)
    remaining = context.time_remaining()
    if remaining is not None:
        candidates.append(now + remaining)
    return int(min(candidates) * 1000) if candidates else 0


def service_names() -> tuple[str, ...]:
    return (gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,)
