"""inference.GRPCInferenceService: the Open Inference Protocol (KServe v2 / Triton) gateway.

Same port, API keys, tenants and quotas as mediamesh.v1.Gateway. Errors follow the status
codes Triton gives the same mistakes: an unknown model is NOT_FOUND ("Request for unknown
model"), malformed input INVALID_ARGUMENT, an expired timeout UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from mediamesh.common.api.lenient import add_servicer
from mediamesh.common.errors import InvalidArgument, MeshError, NotFound, StatusCode
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import gateway_pb2
from mediamesh.common.registry import ModelSpec
from mediamesh.common.server import Registration
from mediamesh.gateway import metrics
from mediamesh.gateway.api import kserve_messages as messages
from mediamesh.gateway.api.kserve_jobs import ElementProgress, run_call
from mediamesh.gateway.api.kserve_statistics import model_statistics
from mediamesh.gateway.api.refused_requests import counting_refused_jobs
from mediamesh.gateway.api.upstream import (
    Upstream,
    caller_of,
    key_check,
    mesh_errors,
    reader_of,
)
from mediamesh.gateway.core.inference_call import (
    MODEL_VERSION,
    ParamValue,
    call_deadline_sooner,
    check_version,
    encode_outputs,
    parse_call,
    preview_output,
    refusal,
)
from mediamesh.gateway.core.kserve_status import stream_error_text
from mediamesh.gateway.core.model_config import check_repository, repository_index, unready_reason
from mediamesh.gateway.core.tenancy import Caller

log = logging.getLogger("mediamesh.gateway.kserve")

SERVER_NAME = "mediamesh"
# Protocol extensions served: request priority and timeout, request parameters, and Triton's
# model configuration and statistics. Of Triton's model repository extension only the index
# is served (loading is the workers' business), so it is not named here.
EXTENSIONS = ("schedule_policy", "parameters", "model_configuration", "statistics")
# Within a probe's usual one-second timeout (the kubelet's default): a scheduler that takes
# longer to list its models is not ready to take work either, and a probe that timed out
# would learn less than this answer says.
READY_TIMEOUT_S = 0.8
# The rpcs that need no API key: probes send none, and learn nothing about tenants.
OPEN_METHODS = ("ServerLive", "ServerReady")


def server_version() -> str:
    """mediamesh's version, as server metadata names it."""
    try:
        return importlib.metadata.version("mediamesh")
    except importlib.metadata.PackageNotFoundError:
        return "0"


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """inference.GRPCInferenceService on the mesh: health, metadata and inference via `upstream`."""

    def __init__(self, upstream: Upstream) -> None:
        self.up = upstream

    # ---- health and metadata -------------------------------------------------------------

    async def ServerLive(
        self,
        request: pb.ServerLiveRequest,
        context: grpc.aio.ServicerContext[pb.ServerLiveRequest, pb.ServerLiveResponse],
    ) -> pb.ServerLiveResponse:
        """Always live; needs no API key, like a gRPC health probe."""
        # Open like grpc.health.v1: probes carry no API key and learn nothing about tenants.
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self,
        request: pb.ServerReadyRequest,
        context: grpc.aio.ServicerContext[pb.ServerReadyRequest, pb.ServerReadyResponse],
    ) -> pb.ServerReadyResponse:
        """Ready when the scheduler reports any model ready; not ready if it cannot be reached."""
        ready = await self._ready_models()
        return pb.ServerReadyResponse(ready=bool(ready))

    async def ModelReady(
        self,
        request: pb.ModelReadyRequest,
        context: grpc.aio.ServicerContext[pb.ModelReadyRequest, pb.ModelReadyResponse],
    ) -> pb.ModelReadyResponse:
        """Whether the model is ready in the mesh; an unknown model or version is not ready."""
        reader_of(self.up.tenancy, context)
        # Like Triton, an unknown model or version is simply not ready.
        if self.up.registry.get(request.name) is None or request.version not in ("", MODEL_VERSION):
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=request.name in await self._ready_models())

    async def ServerMetadata(
        self,
        request: pb.ServerMetadataRequest,
        context: grpc.aio.ServicerContext[pb.ServerMetadataRequest, pb.ServerMetadataResponse],
    ) -> pb.ServerMetadataResponse:
        """The server's name, mediamesh version and the protocol extensions it serves."""
        reader_of(self.up.tenancy, context)
        return pb.ServerMetadataResponse(
            name=SERVER_NAME, version=server_version(), extensions=list(EXTENSIONS)
        )

    async def ModelMetadata(
        self,
        request: pb.ModelMetadataRequest,
        context: grpc.aio.ServicerContext[pb.ModelMetadataRequest, pb.ModelMetadataResponse],
    ) -> pb.ModelMetadataResponse:
        """The model's input and output tensors; NOT_FOUND for an unknown model or version."""
        reader_of(self.up.tenancy, context)
        spec = self._model(request.name, request.version)
        return messages.model_metadata(spec)

    async def ModelConfig(
        self,
        request: pb.ModelConfigRequest,
        context: grpc.aio.ServicerContext[pb.ModelConfigRequest, pb.ModelConfigResponse],
    ) -> pb.ModelConfigResponse:
        """The model's configuration; NOT_FOUND for an unknown model or version."""
        reader_of(self.up.tenancy, context)
        spec = self._model(request.name, request.version)
        return pb.ModelConfigResponse(config=messages.model_config_message(spec))

    async def ModelStatistics(
        self,
        request: pb.ModelStatisticsRequest,
        context: grpc.aio.ServicerContext[pb.ModelStatisticsRequest, pb.ModelStatisticsResponse],
    ) -> pb.ModelStatisticsResponse:
        """The model's (every model's, without a name) counts and phase durations since the
        scheduler started: the caller's tenant's jobs, every tenant's for an admin key."""
        caller = reader_of(self.up.tenancy, context)
        name = statistics_model(self.up, request.name, request.version)
        return await model_statistics(self.up, caller, name)

    async def RepositoryIndex(
        self,
        request: pb.RepositoryIndexRequest,
        context: grpc.aio.ServicerContext[pb.RepositoryIndexRequest, pb.RepositoryIndexResponse],
    ) -> pb.RepositoryIndexResponse:
        """Every model with its state (only the ready ones with `ready`)."""
        reader_of(self.up.tenancy, context)
        check_repository(request.repository_name)
        index = repository_index(
            self.up.registry.names, await unready_models(self.up), ready_only=request.ready
        )
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**model) for model in index]
        )

    # ---- inference -----------------------------------------------------------------------

    async def ModelInfer(
        self,
        request: pb.ModelInferRequest,
        context: grpc.aio.ServicerContext[pb.ModelInferRequest, pb.ModelInferResponse],
    ) -> pb.ModelInferResponse:
        """Runs each element of the `prompt` input as one job and answers with all their outputs.

        The jobs are cancelled if the call fails or the caller goes away.
        """
        caller = caller_of(self.up.tenancy, context)
        return await self._infer(request, caller, context)

    async def ModelStreamInfer(
        self,
        request_iterator: AsyncIterator[pb.ModelInferRequest],
        context: grpc.aio.ServicerContext[pb.ModelInferRequest, pb.ModelStreamInferResponse],
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Runs each streamed request concurrently; answers with progress responses, then one
        final response (flagged `triton_final_response`) or an error message per request.

        A failed request does not end the stream; responses of different requests interleave.
        """
        caller = caller_of(self.up.tenancy, context)
        responses: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(
                        self._stream_one(request, caller, context, responses.put_nowait)
                    )
                    running.add(task)
                    task.add_done_callback(running.discard)
                while running:
                    await asyncio.wait(set(running))
            finally:
                responses.put_nowait(None)

        reader = asyncio.create_task(read_requests())
        try:
            while (response := await responses.get()) is not None:
                yield response
            await reader
        finally:
            # The caller left or the stream failed: nobody will read the results.
            reader.cancel()
            for task in list(running):
                task.cancel()

    async def _stream_one(
        self,
        request: pb.ModelInferRequest,
        caller: Caller,
        context: grpc.aio.ServicerContext[pb.ModelInferRequest, Any],
        emit: Callable[[pb.ModelStreamInferResponse], None],
    ) -> None:
        def progress(p: ElementProgress) -> None:
            parameters: dict[str, ParamValue] = {
                "step": p.step,
                "total_steps": p.total_steps,
                "element": p.element,
                "job_id": p.job_id,
                messages.FINAL_FLAG: False,
            }
            outputs = [preview_output(p.preview, p.preview_mime_type)] if p.preview else []
            emit(messages.stream_response(request, outputs, parameters))

        try:
            final = await self._infer(request, caller, context, progress)
            final.parameters[messages.FINAL_FLAG].bool_param = True
            emit(pb.ModelStreamInferResponse(infer_response=final))
        except MeshError as exc:
            text = stream_error_text(exc.code, exc.message, exc.retry_after_s)
            emit(messages.stream_error(request, text))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("stream request %r for model %r failed", request.id, request.model_name)
            text = stream_error_text(StatusCode.INTERNAL, "internal error; see the gateway log")
            emit(messages.stream_error(request, text))

    async def _infer(
        self,
        request: pb.ModelInferRequest,
        caller: Caller,
        context: grpc.aio.ServicerContext[pb.ModelInferRequest, Any],
        on_progress: Callable[[ElementProgress], None] | None = None,
    ) -> pb.ModelInferResponse:
        queue = metrics.queue_of(self.up.registry, request.model_name)
        with metrics.counting_refusals(queue) as asked:
            spec = self._model(request.model_name, request.model_version)
            call = parse_call(
                spec,
                messages.input_tensors(request),
                messages.parameter_values(request.parameters),
                messages.requested_outputs(request),
                max_adapters=self.up.max_adapters_per_request,
            )
            asked.jobs = len(call.elements)
            if on_progress is None and any(e.preview_every_steps for e in call.elements):
                # Refused rather than ignored: a unary answer has nowhere to put per-step
                # previews.
                raise InvalidArgument(
                    "parameters.preview_every_steps: previews come on ModelStreamInfer's "
                    "per-step responses; ModelInfer answers once, so it takes none"
                )
        try:
            results = await run_call(self.up, call, caller, context, on_progress)
        except MeshError as exc:
            # Named after whichever bound the scheduler refused: the call's gRPC deadline or
            # the jobs' own `timeout`.
            deadline_first = call_deadline_sooner(
                call.elements[0].timeout_ms, context.time_remaining()
            )
            raise refusal(exc, deadline_first) from None
        outputs = encode_outputs(results, call.outputs, call.element_dims)
        return messages.infer_response(request, outputs)

    # ---- helpers -------------------------------------------------------------------------

    def _model(self, name: str, version: str) -> ModelSpec:
        return inference_model(self.up, name, version)

    async def _ready_models(self) -> set[str]:
        return await ready_models(self.up)


def inference_model(up: Upstream, name: str, version: str) -> ModelSpec:
    """The registry entry of `name` at `version` ("" or the one version); NotFound worded
    as Triton words it otherwise."""
    spec = up.registry.get(name)
    if spec is None:
        raise NotFound(
            f"Request for unknown model: '{name}' is not found; "
            f"known: {', '.join(up.registry.names)}"
        )
    check_version(spec, version)
    return spec


def statistics_model(up: Upstream, name: str, version: str) -> str:
    """The model a statistics request names ("" for every model); NotFound for an unknown
    model or version, InvalidArgument for a version without a model."""
    if name:
        return inference_model(up, name, version).name
    if version:
        raise InvalidArgument(
            f"version: {version!r} names a version of no model; give the model's name too, "
            "or no version for every model's statistics"
        )
    return ""


async def ready_models(up: Upstream) -> set[str]:
    """The registry models some serving worker has ready, as the scheduler reports them;
    none when it cannot be reached."""
    return set(up.registry.names) - set(await unready_models(up))


async def unready_models(up: Upstream) -> dict[str, str]:
    """Why each registry model that is not ready is not, as the scheduler reports them;
    every model, when it cannot be reached."""
    try:
        async with mesh_errors():
            reply = await up.scheduler.ListModels(
                gateway_pb2.ListModelsRequest(), timeout=READY_TIMEOUT_S
            )
    except MeshError as exc:
        return dict.fromkeys(up.registry.names, f"the scheduler cannot be reached: {exc.code}")
    listed = {model.name: model for model in reply.models}
    reasons = {}
    for name in up.registry.names:
        model = listed.get(name)
        if model is None or not model.ready:
            reasons[name] = unready_reason(model.warmup if model is not None else "")
    return reasons


def registration(upstream: Upstream) -> Registration:
    """The Registration that serves inference.GRPCInferenceService through `upstream`; every
    rpc but the probes' (`OPEN_METHODS`) needs an API key (when the gateway has keys),
    checked before its request is read."""
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    return Registration(
        (service.full_name,),
        lambda server: add_servicer(
            server,
            InferenceServicer(upstream),
            service,
            on_refused=counting_refused_jobs(upstream.registry, {"ModelInfer": "model_name"}),
        ),
        authenticate=key_check(upstream.tenancy),
        open_methods=frozenset(f"{service.full_name}/{name}" for name in OPEN_METHODS),
    )
