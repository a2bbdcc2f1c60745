"""mediamesh.v1.Gateway: authenticate, validate, then forward to the scheduler."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from mediamesh.common.api.lenient import add_servicer
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.input_images import check_later_chunk
from mediamesh.common.server import Registration
from mediamesh.gateway.api.dataplane import DataPlane
from mediamesh.gateway.api.refused_requests import counting_refused_jobs
from mediamesh.gateway.api.submit_call import submit_for_call
from mediamesh.gateway.api.upstream import (
    Upstream,
    caller_of,
    key_check,
    reader_of,
    relay_errors,
)


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    """mediamesh.v1.Gateway: authenticates and checks each call, then forwards it upstream."""

    def __init__(self, upstream: Upstream) -> None:
        self.up = upstream
        # The same validation, admission and submit path as the HTTP face.
        self.plane = DataPlane(upstream)

    async def Generate(
        self,
        request: common_pb2.GenerateRequest,
        context: grpc.aio.ServicerContext[common_pb2.GenerateRequest, common_pb2.GenerateEvent],
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """Submits the request and streams the job's events until its result or error."""
        caller = caller_of(self.up.tenancy, context)
        async for event in self.plane.generate(request, caller, context.time_remaining()):
            yield event

    async def Submit(
        self,
        request: common_pb2.GenerateRequest,
        context: grpc.aio.ServicerContext[common_pb2.GenerateRequest, gateway_pb2.JobHandle],
    ) -> gateway_pb2.JobHandle:
        """Submits the request and answers with the job's handle at once; the call's deadline
        does not bound the job, but a job the call ended before learning of is cancelled
        (`submit_for_call`)."""
        caller = caller_of(self.up.tenancy, context)
        return await submit_for_call(self.plane, request, caller, context)

    async def Watch(
        self,
        request: gateway_pb2.WatchRequest,
        context: grpc.aio.ServicerContext[gateway_pb2.WatchRequest, common_pb2.GenerateEvent],
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """Streams the events of one of the caller's jobs; a finished job replays its end."""
        caller = reader_of(self.up.tenancy, context)
        async for event in self.plane.watch(request.job_id, caller):
            yield event

    async def Cancel(
        self,
        request: gateway_pb2.CancelRequest,
        context: grpc.aio.ServicerContext[gateway_pb2.CancelRequest, common_pb2.JobInfo],
    ) -> common_pb2.JobInfo:
        """Cancels one of the caller's jobs; answers with the job's state after cancelling."""
        return await self.plane.cancel(request.job_id, reader_of(self.up.tenancy, context))

    async def GetJob(
        self,
        request: gateway_pb2.GetJobRequest,
        context: grpc.aio.ServicerContext[gateway_pb2.GetJobRequest, common_pb2.JobInfo],
    ) -> common_pb2.JobInfo:
        """The current state of one of the caller's jobs."""
        return await self.plane.job(request.job_id, reader_of(self.up.tenancy, context))

    async def DeleteJob(
        self,
        request: gateway_pb2.DeleteJobRequest,
        context: grpc.aio.ServicerContext[gateway_pb2.DeleteJobRequest, common_pb2.DeletedJob],
    ) -> common_pb2.DeletedJob:
        """Deletes one of the caller's ended jobs, its result and its record; the job is
        unknown afterwards."""
        return await self.plane.delete(request.job_id, reader_of(self.up.tenancy, context))

    async def ListJobs(
        self,
        request: gateway_pb2.ListJobsRequest,
        context: grpc.aio.ServicerContext[
            gateway_pb2.ListJobsRequest, gateway_pb2.ListJobsResponse
        ],
    ) -> gateway_pb2.ListJobsResponse:
        """A page of the caller's jobs, newest first unless it asks for oldest first."""
        return await self.plane.jobs(request, reader_of(self.up.tenancy, context))

    async def ListModels(
        self,
        request: gateway_pb2.ListModelsRequest,
        context: grpc.aio.ServicerContext[
            gateway_pb2.ListModelsRequest, gateway_pb2.ListModelsResponse
        ],
    ) -> gateway_pb2.ListModelsResponse:
        """The models the mesh serves and whether each is ready."""
        reader_of(self.up.tenancy, context)
        return await self.plane.models()

    async def Upload(
        self,
        request_iterator: AsyncIterator[gateway_pb2.UploadChunk],
        context: grpc.aio.ServicerContext[gateway_pb2.UploadChunk, gateway_pb2.UploadHandle],
    ) -> gateway_pb2.UploadHandle:
        """Streams a large input to the scheduler under the caller's tenant; the handle's
        input_id goes in a later request's image_id or mask_image_id."""
        caller = reader_of(self.up.tenancy, context)
        async with relay_errors(context):
            return await self.up.upload(consistent_chunks(request_iterator), caller)

    async def Download(
        self,
        request: gateway_pb2.DownloadRequest,
        context: grpc.aio.ServicerContext[gateway_pb2.DownloadRequest, gateway_pb2.DownloadChunk],
    ) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        """Streams a job's artifact in chunks, starting at the request's byte offset."""
        caller = reader_of(self.up.tenancy, context)
        async for chunk in self.plane.download(request.job_id, caller, request.offset):
            yield chunk


async def consistent_chunks(
    chunks: AsyncIterator[gateway_pb2.UploadChunk],
) -> AsyncIterator[gateway_pb2.UploadChunk]:
    """`chunks`, each after the first checked to leave `sha256` and `mime_type` empty or as
    the first chunk set them (`check_later_chunk`): the scheduler reads them from the first
    chunk alone, so another value on a later one would be ignored without a word."""
    first: tuple[str, str] | None = None
    index = 0
    async for chunk in chunks:
        if first is None:
            first = (chunk.sha256, chunk.mime_type)
        else:
            check_later_chunk(index, chunk.sha256, chunk.mime_type, first)
        index += 1
        yield chunk


def registration(upstream: Upstream) -> Registration:
    """The Registration that serves mediamesh.v1.Gateway through `upstream`; every rpc needs
    an API key (when the gateway has keys), checked before its request is read."""
    service = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
    return Registration(
        (service.full_name,),
        lambda server: add_servicer(
            server,
            GatewayServicer(upstream),
            service,
            on_refused=counting_refused_jobs(
                upstream.registry, {"Generate": "model", "Submit": "model"}
            ),
        ),
        authenticate=key_check(upstream.tenancy),
    )
