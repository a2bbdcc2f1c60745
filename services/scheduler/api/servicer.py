"""mediamesh.v1.Scheduler over gRPC: decodes requests, calls the runtime, encodes answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator

import grpc

from mediamesh.common.api.lenient import add_servicer
from mediamesh.common.api.requests import request_fields
from mediamesh.common.errors import InvalidArgument, MeshError, Unavailable
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.common.input_images import check_later_chunk
from mediamesh.common.params import find_model, parse_priority, resolve
from mediamesh.common.registry import Registry
from mediamesh.common.telemetry import request_trace_carrier
from mediamesh.common.tenants import checked_tenant
from mediamesh.common.warmup import WARMUP_WARMING
from mediamesh.scheduler.api import convert
from mediamesh.scheduler.api.job_link import JobLinks, serve_job_link
from mediamesh.scheduler.core.delivery import ResultDelivery
from mediamesh.scheduler.core.interface import INVALID_REQUEST, NewJob
from mediamesh.scheduler.core.jobs import Job, Priority, TenantQuota
from mediamesh.scheduler.core.units import WorkerInfo
from mediamesh.scheduler.ended_jobs import JobRecord
from mediamesh.scheduler.events import WatchEvent
from mediamesh.scheduler.runtime import SchedulerRuntime
from mediamesh.scheduler.store.artifacts import SignedUrl
from mediamesh.scheduler.uploads import UploadWriter
from mediamesh.scheduler.webhook_policy import webhook_target

log = logging.getLogger(__name__)

# Longest a leaving worker's question waits for its batches' last events to be applied
# (an artifact write, a store save): well under the worker's own wait for the answer.
SETTLE_TIMEOUT_S = 10.0


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    """mediamesh.v1.Scheduler: the gateway's job calls and the workers' Attach sessions.

    It trusts the tenant and quota the gateway sends, but checks every request's bounds and
    fields again itself.
    """

    def __init__(
        self,
        runtime: SchedulerRuntime,
        registry: Registry,
        inline_limit: int,
        chunk_bytes: int,
        preemption: dict[str, str] | None = None,
    ) -> None:
        self.runtime = runtime
        self.registry = registry
        self.inline_limit = inline_limit
        self.chunk_bytes = chunk_bytes
        # Model name -> "resume"/"restart", read from the model files once at start.
        self.preemption = preemption or {}
        # Closed when the scheduler stops (SchedulerService.stop).
        self.links = JobLinks()

    @property
    def stopping(self) -> bool:
        """Whether the scheduler has begun to stop (SchedulerService.stop closes `links`
        first, before the server's stop closes the workers' streams)."""
        return self.links.closing or self.runtime.stopping

    async def Submit(
        self,
        request: scheduler_pb2.SubmitRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.SubmitRequest, gateway_pb2.JobHandle],
    ) -> gateway_pb2.JobHandle:
        """Validates the request and queues a job; a repeated idempotency key returns the
        existing job, marked `deduplicated`."""
        carrier = request_trace_carrier(dict(context.invocation_metadata() or ()))
        job, deduplicated = await self.submit(request, carrier)
        # The job as GetJob answers it, so that a caller showing it needs no second call. An
        # earlier job found by its key may have ended and left memory: its result is stored.
        record = JobRecord(job, self.runtime.results.get(job.job_id))
        if deduplicated:
            record = await self.runtime.ended.find(job.job_id) or record
        return gateway_pb2.JobHandle(
            job_id=job.job_id,
            state=convert.state(job.state),
            deduplicated=deduplicated,
            job=await self._job_info(record),
        )

    async def SubmitAndWatch(
        self,
        request: scheduler_pb2.SubmitRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.SubmitRequest, common_pb2.GenerateEvent],
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """Submit's checks and queueing, then the new job's events to its end, as Watch
        streams them; a repeated idempotency key follows the existing job."""
        carrier = request_trace_carrier(dict(context.invocation_metadata() or ()))
        async for event in self.submit_and_watch(request, carrier):
            yield event

    async def JobLink(
        self,
        requests: AsyncIterator[scheduler_pb2.JobLinkRequests],
        context: grpc.aio.ServicerContext[
            scheduler_pb2.JobLinkRequests, scheduler_pb2.JobLinkEvents
        ],
    ) -> AsyncIterator[scheduler_pb2.JobLinkEvents]:
        """A gateway's SubmitAndWatch exchanges over one stream (job_link.py)."""
        async for events in serve_job_link(
            requests, self.submit_and_watch, self._cancel_for_tenant, self.links
        ):
            yield events

    async def _cancel_for_tenant(self, job_id: str, tenant: str) -> None:
        await self.runtime.cancel(job_id, tenant, admin=False)

    async def submit_and_watch(
        self, request: scheduler_pb2.SubmitRequest, carrier: dict[str, str]
    ) -> AsyncGenerator[common_pb2.GenerateEvent, None]:
        """Submit's checks and queueing, then the job's events to its end (its state when
        queued and its final event alone with `final_only`)."""
        job, _deduplicated = await self.submit(request, carrier)
        events = self.runtime.watch(
            job.job_id, job.tenant, final_only=request.final_only, snapshot_first=True
        )
        async for event in self._encoded(events):
            yield event

    async def submit(
        self, request: scheduler_pb2.SubmitRequest, carrier: dict[str, str]
    ) -> tuple[Job, bool]:
        """The job a SubmitRequest queues (or the earlier one its idempotency key names),
        and whether it was that earlier one; `carrier` is the request's trace context."""
        # Again here: a gateway's checks are not the scheduler's only defence.
        fields = request_fields(request.request)
        inputs = self.runtime.inputs
        try:
            spec = find_model(self.registry, fields.model)
        except MeshError as exc:
            self.runtime.refused(fields.model, request.tenant, carrier, exc, "unknown_model")
            raise
        try:
            tenant = checked_tenant(request.tenant)
            delivery = self._delivery(request.request, tenant)
            fields = await inputs.with_uploads(fields, tenant)
            limit = self.runtime.settings.max_adapters_per_request
            params = resolve(spec, fields, max_adapters=limit)
            params = await inputs.store(spec, params, fields)
            priority = parse_priority(fields.priority)
        except MeshError as exc:
            # Counted beside admission's refusals, so that one series shows every Submit
            # refused: a client sending bad requests is as visible as a full queue.
            self.runtime.refused(fields.model, request.tenant, carrier, exc, INVALID_REQUEST)
            raise
        new = NewJob(
            tenant=tenant,
            model=spec.name,
            priority=priority,
            params=params,
            deadline=request.deadline_unix_ms / 1000 if request.deadline_unix_ms else None,
            idempotency_key=request.request.idempotency_key,
            quota=TenantQuota(
                weight=request.tenant_weight or 1.0,
                max_queued=request.max_queued_jobs,
                max_running=request.max_running_jobs,
            ),
            trace_carrier=carrier,
            delivery=delivery,
            any_seed=fields.seed is None,
        )
        try:
            job, deduplicated = await self.runtime.submit(new, request.result_quota_bytes)
        except BaseException:
            inputs.discard(params)
            raise
        if deduplicated:
            inputs.discard(params)  # the earlier job keeps its own copies
        return job, deduplicated

    def _delivery(self, request: common_pb2.GenerateRequest, tenant: str) -> ResultDelivery:
        """The request's result URL and webhook options, the webhook checked against the
        allowlist and the tenant's secret."""
        webhook = None
        if request.HasField("webhook"):
            hook = request.webhook
            settings = self.runtime.webhooks.settings
            webhook = webhook_target(hook.url, list(hook.events), tenant, settings)
        return ResultDelivery(result_as_url=request.result_as_url, webhook=webhook)

    async def _result_parts(self, event: WatchEvent) -> tuple[bytes | None, SignedUrl | None]:
        """A result event's inline bytes (when they fit and no URL was asked for), or its
        presigned URL (when the store can sign one)."""
        artifact = event.artifact
        if artifact is None:
            return None, None
        # From memory, or from the store for an ended job no longer held.
        record = await self.runtime.ended.find(event.job_id)
        as_url = record is not None and record.job.delivery.result_as_url
        if not as_url and artifact.size_bytes <= self.inline_limit:
            return await self.runtime.artifacts.read(artifact.path), None
        if record is None:
            return None, None
        return None, await self.runtime.result_url(
            JobRecord(record.job, artifact), self.inline_limit
        )

    async def Watch(
        self,
        request: scheduler_pb2.ScopedJobRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.ScopedJobRequest, common_pb2.GenerateEvent],
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        """Streams the job's events from its current state to its end; a result is inline when
        the artifact fits `inline_limit`. NOT_FOUND for another tenant's job unless admin."""
        tenant = checked_tenant(request.tenant)
        events = self.runtime.watch(
            request.job_id, tenant, admin=request.admin, final_only=request.final_only
        )
        async for event in self._encoded(events):
            yield event

    async def _encoded(
        self, events: AsyncIterator[WatchEvent]
    ) -> AsyncIterator[common_pb2.GenerateEvent]:
        async for event in events:
            data, url = await self._result_parts(event)
            yield convert.generate_event(event, data, self.inline_limit, url)

    async def Cancel(
        self,
        request: scheduler_pb2.ScopedJobRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.ScopedJobRequest, common_pb2.JobInfo],
    ) -> common_pb2.JobInfo:
        """Cancels the tenant's job (any job for admin) and answers with its state afterwards."""
        tenant = checked_tenant(request.tenant)
        record = await self.runtime.cancel(request.job_id, tenant, admin=request.admin)
        return await self._job_info(record)

    async def _job_info(self, record: JobRecord) -> common_pb2.JobInfo:
        """The job as every rpc describing one shows it, with its result's presigned URL."""
        job = record.job
        url = await self.runtime.result_url(record, self.inline_limit)
        return convert.job_info(
            job,
            record.artifact,
            url,
            paused=self.runtime.core.is_paused(job),
            retention_s=self.runtime.settings.retention_s,
        )

    async def DeleteJob(
        self,
        request: scheduler_pb2.ScopedJobRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.ScopedJobRequest, common_pb2.DeletedJob],
    ) -> common_pb2.DeletedJob:
        """Deletes the tenant's ended job (any job for admin) with its result."""
        tenant = checked_tenant(request.tenant)
        deleted = await self.runtime.delete(request.job_id, tenant, admin=request.admin)
        return common_pb2.DeletedJob(
            job_id=deleted.job_id,
            state=deleted.state,
            result_bytes=deleted.result_bytes,
        )

    async def GetJob(
        self,
        request: scheduler_pb2.ScopedJobRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.ScopedJobRequest, common_pb2.JobInfo],
    ) -> common_pb2.JobInfo:
        """The tenant's job (any job for admin); NOT_FOUND otherwise."""
        tenant = checked_tenant(request.tenant)
        record = await self.runtime.owned_job(request.job_id, tenant, admin=request.admin)
        return await self._job_info(record)

    async def ListJobs(
        self,
        request: scheduler_pb2.ScopedListJobsRequest,
        context: grpc.aio.ServicerContext[
            scheduler_pb2.ScopedListJobsRequest, gateway_pb2.ListJobsResponse
        ],
    ) -> gateway_pb2.ListJobsResponse:
        """A page of the tenant's jobs (every tenant's for admin)."""
        tenant = checked_tenant(request.tenant)
        query = convert.job_query(request.query)
        records, has_more = await self.runtime.list_jobs(tenant, query, admin=request.admin)
        reply = gateway_pb2.ListJobsResponse(has_more=has_more)
        for record in records:
            reply.jobs.append(await self._job_info(record))
        return reply

    async def ListModels(
        self,
        request: gateway_pb2.ListModelsRequest,
        context: grpc.aio.ServicerContext[
            gateway_pb2.ListModelsRequest, gateway_pb2.ListModelsResponse
        ],
    ) -> gateway_pb2.ListModelsResponse:
        """Every registry model, ready where a worker that is not draining serves it."""
        devices: dict[str, list[str]] = {}
        loaded: set[str] = set()
        for unit in self.runtime.core.units.values():
            if unit.draining:
                continue
            loaded.update(m for m in unit.info.models if m not in unit.cold)
            for model, ids in unit.info.model_devices:
                # Ranks sharing one device type ("cpu", "cpu") are still distinct devices.
                labels = (
                    [f"{d}#{i}" for i, d in enumerate(ids)] if len(set(ids)) < len(ids) else ids
                )
                devices.setdefault(model, []).extend(f"{unit.worker_id}/{d}" for d in labels)
        warming = frozenset(
            m
            for unit in self.runtime.core.units.values()
            if not unit.draining
            for m in unit.info.warming
        )
        cold = frozenset(devices) - loaded - warming
        return convert.list_models(
            self.registry.models, devices, warming, self.preemption, cold=cold
        )

    async def Download(
        self,
        request: scheduler_pb2.ScopedJobRequest,
        context: grpc.aio.ServicerContext[
            scheduler_pb2.ScopedJobRequest, gateway_pb2.DownloadChunk
        ],
    ) -> AsyncIterator[gateway_pb2.DownloadChunk]:
        """Streams the job's artifact in `chunk_bytes` chunks from the request's offset.

        FAILED_PRECONDITION when the job has no result, INVALID_ARGUMENT for an offset past the
        end.
        """
        tenant = checked_tenant(request.tenant)
        artifact = await self.runtime.artifact_of(request.job_id, tenant, admin=request.admin)
        if request.offset > artifact.size_bytes:
            raise InvalidArgument(
                f"offset: {request.offset} is past the end of the artifact ({artifact.size_bytes})"
            )
        chunks = self.runtime.artifacts.chunks(artifact.path, request.offset, self.chunk_bytes)
        async for offset, data in chunks:
            yield gateway_pb2.DownloadChunk(
                data=data,
                offset=offset,
                total_size=artifact.size_bytes,
                mime_type=artifact.mime_type,
                sha256=artifact.sha256,
            )

    async def Upload(
        self,
        request_iterator: AsyncIterator[scheduler_pb2.ScopedUploadChunk],
        context: grpc.aio.ServicerContext[
            scheduler_pb2.ScopedUploadChunk, gateway_pb2.UploadHandle
        ],
    ) -> gateway_pb2.UploadHandle:
        """Stores an upload for the first chunk's tenant. DATA_LOSS when the bytes do not
        match the declared SHA-256, RESOURCE_EXHAUSTED past the tenant's upload quota."""
        uploads = self.runtime.inputs.uploads
        writer: UploadWriter | None = None
        first: tuple[str, str, str] = ("", "", "")
        index = 0
        try:
            async for message in request_iterator:
                chunk = message.chunk
                if writer is None:
                    first = (message.tenant, chunk.sha256, chunk.mime_type)
                    writer = uploads.begin(
                        checked_tenant(message.tenant),
                        chunk.sha256,
                        chunk.mime_type,
                        message.quota_bytes,
                    )
                else:
                    # The gateway checks these too; a client of this internal API may not.
                    check_later_upload_chunk(index, message.tenant, chunk, first)
                index += 1
                await asyncio.to_thread(writer.write, chunk.data)
            if writer is None:
                raise InvalidArgument("data: an upload needs at least one chunk")
            stored = await asyncio.to_thread(writer.finish)
        except MeshError:
            if writer is not None:
                writer.abort()
            # Answer only once the stream has ended: a gateway's asyncio client cannot read
            # an answer given while it is still writing, and reports INTERNAL instead of it
            # (grpc/grpc#36066). The gateway's own deadline bounds the rest of the stream.
            with contextlib.suppress(Exception):
                async for _ in request_iterator:
                    pass
            raise
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        return gateway_pb2.UploadHandle(
            input_id=stored.input_id,
            size_bytes=stored.size_bytes,
            sha256=stored.sha256,
            expires_unix_ms=int(stored.expires_at * 1000),
        )

    async def Attach(
        self,
        request_iterator: AsyncIterator[scheduler_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext[
            scheduler_pb2.WorkerMessage, scheduler_pb2.SchedulerMessage
        ],
    ) -> AsyncIterator[scheduler_pb2.SchedulerMessage]:
        """A worker's session: registration, then heartbeats and questions about ended batches.

        A heartbeat from a worker that is no longer registered ends the stream with UNAVAILABLE,
        so it registers again. When the stream closes the worker is gone.
        """
        info: WorkerInfo | None = None
        settings = self.runtime.settings
        try:
            async for message in request_iterator:
                kind = message.WhichOneof("message")
                if kind == "register":
                    reg = message.register
                    if not reg.worker_id or not reg.address:
                        raise InvalidArgument("register: worker_id and address are required")
                    # A model still warming up on the worker takes no work there yet.
                    routed = [m for m in reg.models if m.warmup != WARMUP_WARMING]
                    info = WorkerInfo(
                        worker_id=reg.worker_id,
                        address=reg.address,
                        pool=reg.pool or "on-demand",
                        devices=tuple(d.id for d in reg.devices) or ("cpu",),
                        models=frozenset(m.name for m in routed),
                        capacity=max(reg.capacity, 1),
                        model_devices=tuple((m.name, tuple(m.device_ids)) for m in routed),
                        warming=frozenset(m.name for m in reg.models if m.warmup == WARMUP_WARMING),
                    )
                    self.runtime.register_worker(info)
                    # In the same step as the registration: no scheduling pass runs between
                    # them, so a draining worker is never routed to.
                    self.runtime.worker_heartbeat(
                        info.worker_id,
                        reg.draining,
                        convert.hosted_adapters(reg.models),
                        convert.hosted_residency(reg.models),
                    )
                    yield scheduler_pb2.SchedulerMessage(
                        registered=True,
                        heartbeat_interval_s=settings.heartbeat_interval_s,
                        heartbeat_misses_allowed=settings.heartbeat_misses_allowed,
                    )
                elif kind == "heartbeat" and info is not None:
                    if not self.runtime.registered_as(info):
                        # Dropped (a batch could not reach it) or replaced: the worker's
                        # session reconnects on this and registers afresh.
                        raise Unavailable(
                            f"worker {info.worker_id} is no longer registered; register again"
                        )
                    beat = message.heartbeat
                    self.runtime.worker_heartbeat(
                        info.worker_id,
                        beat.draining,
                        convert.reported_adapters(beat.adapters),
                        convert.hosted_residency(beat.residency),
                    )
                elif kind == "batches_ended" and info is not None:
                    settled = await self.runtime.settle_batches(
                        info, list(message.batches_ended.batch_ids), SETTLE_TIMEOUT_S
                    )
                    yield scheduler_pb2.SchedulerMessage(
                        settled=scheduler_pb2.BatchesSettled(batch_ids=settled)
                    )
        finally:
            # A stopping scheduler closes every worker's stream itself: that is no loss of
            # the worker, and counting it would spend an attempt of each of its jobs per
            # graceful restart (a rolling upgrade failed long jobs). Those jobs stay as they
            # are stored and queue again at the next start, as after a crash.
            if info is not None and not self.stopping:
                with contextlib.suppress(Exception):
                    self.runtime.worker_gone(info, "attach stream closed")

    async def ModelStatistics(
        self,
        request: scheduler_pb2.ScopedModelStatisticsRequest,
        context: grpc.aio.ServicerContext[
            scheduler_pb2.ScopedModelStatisticsRequest, scheduler_pb2.ModelStatisticsReply
        ],
    ) -> scheduler_pb2.ModelStatisticsReply:
        """The models' counts since this scheduler started: the tenant's own jobs, every
        tenant's for admin."""
        tenant = checked_tenant(request.tenant)
        scope = None if request.admin else tenant
        names = list(request.models) or list(self.registry.names)
        for name in names:
            find_model(self.registry, name)
        ledger = self.runtime.statistics
        return scheduler_pb2.ModelStatisticsReply(
            models=[convert.model_statistics(n, ledger.statistics(n, scope)) for n in names]
        )

    async def GetStatus(
        self,
        request: scheduler_pb2.GetStatusRequest,
        context: grpc.aio.ServicerContext[scheduler_pb2.GetStatusRequest, scheduler_pb2.MeshStatus],
    ) -> scheduler_pb2.MeshStatus:
        """A snapshot of the mesh: every queue, every worker, the cost ledger and job counts."""
        core = self.runtime.core
        status = scheduler_pb2.MeshStatus()
        for name, queue in self.runtime.settings.queues.items():
            by_priority = {p.name: core.depth[(name, p)] for p in Priority}
            paused = core.paused_count(name)
            status.queues.append(
                scheduler_pb2.QueueStatus(
                    name=name,
                    depth=sum(by_priority.values()),
                    depth_by_priority=by_priority,
                    work_s=core.work_s[name],
                    oldest_wait_s=core.oldest_wait_s(name),
                    sla_s=queue.sla_s,
                    # Paused jobs hold a slot but compute nothing: counted apart, so
                    # that running says what is computing now.
                    running=core.running[name] - paused,
                    paused=paused,
                )
            )
        for unit in core.units.values():
            status.workers.append(
                scheduler_pb2.WorkerSummary(
                    worker_id=unit.worker_id,
                    pool=unit.pool,
                    devices=list(unit.info.devices),
                    models=sorted(unit.info.models | unit.info.warming),
                    warming=sorted(unit.info.warming),
                    load_s=unit.load_s,
                    state=unit.state,
                    address=unit.info.address,
                    adapters=convert.unit_adapters(unit.adapters),
                )
            )
        ledger = core.ledger
        status.cost.CopyFrom(
            scheduler_pb2.CostSummary(
                cost=ledger.cost(),
                on_demand_cost=ledger.on_demand_cost(),
                device_seconds_by_pool=dict(ledger.by_pool),
                device_seconds_by_model=dict(ledger.by_model),
                device_seconds_by_tenant=dict(ledger.by_tenant),
            )
        )
        status.jobs_by_state.update(self.runtime.ended.counts_by_state())
        status.result_bytes_by_tenant.update(self.runtime.result_usage.by_tenant())
        counts = self.runtime.statistics
        for name in self.registry.names:
            stats = counts.statistics(name, None)
            if stats.execution_count or stats.success.count or stats.fail.count:
                status.models.append(convert.model_statistics(name, stats))
        return status


def registration(servicer: SchedulerServicer) -> tuple[tuple[str, ...], object]:
    """The service names and the server hook that serve mediamesh.v1.Scheduler with `servicer`."""
    service = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"]
    own_checks = frozenset({"JobLink"})
    return (service.full_name,), lambda server: add_servicer(server, servicer, service, own_checks)


def check_later_upload_chunk(
    index: int, tenant: str, chunk: gateway_pb2.UploadChunk, first: tuple[str, str, str]
) -> None:
    """InvalidArgument when chunk `index` of an upload names another tenant than the first
    (`first`: its tenant, sha256 and mime_type), or sets sha256 or mime_type otherwise."""
    if tenant and tenant != first[0]:
        raise InvalidArgument(
            f"tenant: chunk {index + 1} names {tenant[:64]!r}, the first chunk "
            f"{first[0][:64]!r}; an upload belongs to one tenant"
        )
    check_later_chunk(index, chunk.sha256, chunk.mime_type, first[1:])
