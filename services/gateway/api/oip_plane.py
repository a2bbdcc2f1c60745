"""The Open Inference Protocol's operations for the HTTP face (http/oip.py): the same models,
checks and jobs as inference.GRPCInferenceService (kserve.py), with plain data in and out."""

from __future__ import annotations

from typing import Any

from mediamesh.common.errors import InvalidArgument, MeshError
from mediamesh.common.registry import ModelSpec
from mediamesh.gateway import metrics
from mediamesh.gateway.api.kserve import (
    EXTENSIONS,
    SERVER_NAME,
    inference_model,
    ready_models,
    server_version,
    statistics_model,
    unready_models,
)
from mediamesh.gateway.api.kserve_jobs import run_call
from mediamesh.gateway.api.kserve_statistics import model_statistics, statistics_json
from mediamesh.gateway.api.upstream import Upstream
from mediamesh.gateway.core.inference_call import (
    OutputTensor,
    encode_outputs,
    parse_call,
    refusal,
)
from mediamesh.gateway.core.model_config import check_repository, repository_index
from mediamesh.gateway.core.oip_rest import RestInferRequest, check_outputs_sendable
from mediamesh.gateway.core.tenancy import Caller

# Over HTTP the raw form of tensors is served as well (oip_rest.py).
REST_EXTENSIONS = (*EXTENSIONS, "binary_tensor_data")


class InferencePlane:
    """Health, metadata and inference of the Open Inference Protocol through `up`."""

    def __init__(self, up: Upstream) -> None:
        self.up = up

    def model(self, name: str, version: str = "") -> ModelSpec:
        """The model at `version`; NotFound as Triton words it."""
        return inference_model(self.up, name, version)

    async def ready_models(self) -> set[str]:
        """The models ready in the mesh; none when the scheduler cannot be reached."""
        return await ready_models(self.up)

    async def repository_index(self, repository: str, ready_only: bool) -> list[dict[str, str]]:
        """Every model with its state (only the ready ones with `ready_only`)."""
        check_repository(repository)
        unready = await unready_models(self.up)
        return repository_index(self.up.registry.names, unready, ready_only=ready_only)

    async def statistics(self, caller: Caller, name: str, version: str) -> dict[str, Any]:
        """The statistics extension's body for `name` (every model for "") as `caller`
        may see them; NotFound for an unknown model or version."""
        model = statistics_model(self.up, name, version)
        return statistics_json(await model_statistics(self.up, caller, model))

    def server_metadata(self) -> dict[str, Any]:
        """The server's name, mediamesh version and the extensions served over HTTP."""
        return {
            "name": SERVER_NAME,
            "version": server_version(),
            "extensions": list(REST_EXTENSIONS),
        }

    async def infer(
        self, caller: Caller, spec: ModelSpec, request: RestInferRequest
    ) -> list[OutputTensor]:
        """Runs each element of the `prompt` input as one job; the outputs asked for, in
        element order. Refused before any job runs when an output could not be sent."""
        with metrics.counting_refusals(spec.modality) as asked:
            call = parse_call(
                spec,
                request.inputs,
                request.parameters,
                request.outputs,
                max_adapters=self.up.max_adapters_per_request,
            )
            asked.jobs = len(call.elements)
            if any(e.preview_every_steps for e in call.elements):
                raise InvalidArgument(
                    "parameters.preview_every_steps: previews come on the gRPC protocol's "
                    "ModelStreamInfer; an HTTP inference answers once, so it takes none"
                )
            check_outputs_sendable(request, call.outputs)
        try:
            results = await run_call(self.up, call, caller, None)
        except MeshError as exc:
            raise refusal(exc) from None
        return encode_outputs(results, call.outputs, call.element_dims)
