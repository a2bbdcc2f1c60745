"""Run one Open Inference Protocol call as mesh jobs: submit every element, follow, collect.

The caller has no job ids to come back with, so unlike mediamesh.v1.Gateway/Generate the
jobs of a call that fails, is cancelled or loses its caller are cancelled too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from mediamesh.common.errors import MeshError, PayloadTooLarge, Unavailable
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2
from mediamesh.common.params import RequestFields, parse_priority
from mediamesh.gateway import metrics
from mediamesh.gateway.api.upstream import Upstream, call_deadline_ms, mesh_errors, replayed
from mediamesh.gateway.core.inference_call import ElementResult, InferCall, job_failure
from mediamesh.gateway.core.tenancy import Caller

# Room left in a message for everything but the artifacts themselves.
_ENVELOPE_BYTES = 64 * 1024
_CANCEL_TIMEOUT_S = 5
_WATCH_ATTEMPTS = 3
_OPTIONAL_FIELDS = (
    "steps",
    "seed",
    "width",
    "height",
    "num_frames",
    "guidance_scale",
    "duration_s",
    "output_quality",
    "fps",
    "preview_every_steps",
    "timeout_ms",
    "strength",
    # Input images (KServe inputs `image` and `mask_image`), one per element.
    "image",
    "mask_image",
)


@dataclass(frozen=True)
class ElementProgress:
    """A denoising step finished by the job of element `element` of an inference call."""

    element: int
    step: int
    total_steps: int
    job_id: str
    # The step's latent preview, when the request asked for previews ("" / b"": none).
    preview: bytes = b""
    preview_mime_type: str = ""


ProgressSink = Callable[[ElementProgress], None]
# A job's events as the gateway relays them (scheduler errors raised as MeshError).
Events = AsyncGenerator[common_pb2.GenerateEvent, None]


def generate_request(fields: RequestFields) -> common_pb2.GenerateRequest:
    """The GenerateRequest of one call element; optional fields left None stay unset."""
    request = common_pb2.GenerateRequest(
        model=fields.model,
        prompt=fields.prompt,
        negative_prompt=fields.negative_prompt,
        output_format=fields.output_format,
        priority=fields.priority,
    )
    for name in _OPTIONAL_FIELDS:
        value = getattr(fields, name)
        if value is not None:
            setattr(request, name, value)
    for adapter in fields.adapters:
        ref = request.adapters.add(name=adapter.name)
        if adapter.scale is not None:
            ref.scale = adapter.scale
    return request


async def run_call(
    up: Upstream,
    call: InferCall,
    caller: Caller,
    context: grpc.aio.ServicerContext[Any, Any] | None,
    on_progress: ProgressSink | None = None,
) -> list[ElementResult]:
    """Admits the caller, submits one job per element and waits for all, reporting progress.
    `context` is the gRPC call's, whose deadline bounds the jobs too (None over HTTP).

    The results are in element order. If any job fails, the call is cancelled or the caller
    leaves, every job of the call is cancelled and the error is raised. Raises PayloadTooLarge
    when the outputs together would not fit in one response.
    """
    first = call.elements[0]
    try:
        # One job per prompt: a refusal of more than the burst names the tensor that set the
        # count.
        up.tenancy.admit(
            caller,
            call.model,
            parse_priority(first.priority),
            jobs=len(call.elements),
            counted_by="inputs.prompt",
        )
    except MeshError as exc:
        # Refused before the scheduler hears of them, as the native face's refusals are.
        metrics.count_refused(exc, metrics.queue_of(up.registry, call.model), len(call.elements))
        raise
    deadline_ms = call_deadline_ms(first.timeout_ms, context)
    job_ids: list[str] = []
    calls: list[Events] = []
    streams: list[Events] = []
    try:
        # Each element in element order, submitted and then followed. Closing its events
        # before the end cancels the job, even one whose first event has not named it yet.
        for fields in call.elements:
            events = up.submit_and_watch(
                generate_request(fields),
                caller,
                deadline_ms,
                final_only=on_progress is None,
                cancel_when_left=True,
            )
            calls.append(events)
            opening = await anext(events)
            job_ids.append(opening.job_id)
            streams.append(replayed(opening, events))
        results = await _follow_all(up, caller.tenant, job_ids, streams, on_progress)
    except BaseException:
        for opened in calls:
            await opened.aclose()
        # Also those it named on calls of their own, or followed on with Watch; a job the
        # link cancelled already is answered as it stands.
        await asyncio.shield(_cancel(up, caller.tenant, job_ids))
        raise
    total = sum(len(r.data) for r in results)
    if total > up.max_message_bytes - _ENVELOPE_BYTES:
        raise _too_large(total, up.max_message_bytes)
    return results


async def _follow_all(
    up: Upstream,
    tenant: str,
    job_ids: list[str],
    streams: list[Events],
    on_progress: ProgressSink | None,
) -> list[ElementResult]:
    tasks = [
        asyncio.create_task(_follow(up, tenant, index, job_id, stream, on_progress))
        for index, (job_id, stream) in enumerate(zip(job_ids, streams, strict=True))
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task in done and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _follow(
    up: Upstream,
    tenant: str,
    index: int,
    job_id: str,
    submitted: Events,
    on_progress: ProgressSink | None,
) -> ElementResult:
    """The job's outcome from the stream that submitted it; a stream that ends without it
    is watched again (Watch replays the end)."""
    try:
        outcome = await _outcome(up, tenant, index, job_id, submitted, on_progress)
    finally:
        await submitted.aclose()
    for _ in range(_WATCH_ATTEMPTS):
        if outcome is not None:
            return outcome
        # A unary call answers once: the scheduler then sends no per-step progress at all.
        watch = scheduler_pb2.ScopedJobRequest(
            job_id=job_id, tenant=tenant, final_only=on_progress is None
        )
        call = up.scheduler.Watch(watch)
        try:
            outcome = await _outcome(up, tenant, index, job_id, _relayed(call), on_progress)
        finally:
            call.cancel()
    if outcome is not None:
        return outcome
    raise Unavailable(f"job {job_id}: the scheduler ended its event stream without a result")


async def _relayed(call: AsyncIterator[common_pb2.GenerateEvent]) -> Events:
    async with mesh_errors():
        async for event in call:
            yield event


async def _outcome(
    up: Upstream,
    tenant: str,
    index: int,
    job_id: str,
    events: Events,
    on_progress: ProgressSink | None,
) -> ElementResult | None:
    """The result `events` end with (a failure raises); None if they end without one."""
    async for event in events:
        kind = event.WhichOneof("event")
        if kind == "progress" and on_progress is not None:
            p = event.progress
            on_progress(
                ElementProgress(
                    index, p.step, p.total_steps, job_id, p.preview.data, p.preview.mime_type
                )
            )
        elif kind == "result":
            return await _result(up, tenant, job_id, event.result)
        elif kind == "error":
            raise job_failure(job_id, event.error.code, event.error.message)
    return None


async def _result(
    up: Upstream, tenant: str, job_id: str, result: common_pb2.Result
) -> ElementResult:
    data = result.data
    if not data and result.HasField("artifact"):
        size = result.artifact.size_bytes
        if size > up.max_message_bytes - _ENVELOPE_BYTES:
            raise _too_large(size, up.max_message_bytes)
        data = await _download(up, tenant, job_id)
    return ElementResult(data, result.mime_type, result.seed)


async def _download(up: Upstream, tenant: str, job_id: str) -> bytes:
    """The artifact above the inline limit, fetched in the scheduler's chunks and checked."""
    parts: list[bytes] = []
    expected = ""
    chunks = up.scheduler.Download(scheduler_pb2.ScopedJobRequest(job_id=job_id, tenant=tenant))
    async with mesh_errors():
        async for chunk in chunks:
            parts.append(chunk.data)
            expected = chunk.sha256 or expected
    data = b"".join(parts)
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise MeshError(f"job {job_id}: the downloaded artifact does not match its sha256")
    return data


async def _cancel(up: Upstream, tenant: str, job_ids: list[str]) -> None:
    for job_id in job_ids:
        # Best effort: a job that already ended or a scheduler that is gone changes nothing.
        with contextlib.suppress(grpc.aio.AioRpcError):
            await up.scheduler.Cancel(
                scheduler_pb2.ScopedJobRequest(job_id=job_id, tenant=tenant),
                timeout=_CANCEL_TIMEOUT_S,
            )


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"output: {size} bytes of artifacts do not fit in one response "
        f"(gateway.max_message_bytes is {limit}); send fewer prompt elements, or use "
        "mediamesh.v1.Gateway Submit and Download"
    )
