"""The Open Inference Protocol over HTTP/REST (KServe v2, Triton) under /v2: health, server
and model metadata, model readiness and inference, with the binary tensor data extension and
request bodies compressed as Triton reads them (gzip, deflate). The routes of Triton's
extensions the mesh does not offer answer 501 saying so.

The same models, tensors, parameters, API keys and quotas as the gRPC protocol on the
gateway's gRPC port (README, Open Inference Protocol); errors are `{"error": message}`
with the mesh's HTTP statuses. The health probes need no key, as on gRPC.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from mediamesh.common.errors import MeshError, NotFound, StatusCode
from mediamesh.gateway import metrics
from mediamesh.gateway.core.inference_call import model_metadata
from mediamesh.gateway.core.model_config import model_config
from mediamesh.gateway.core.oip_rest import (
    HEADER_LENGTH,
    encode_infer_response,
    parse_index_request,
    parse_infer_request,
)
from mediamesh.gateway.http.bodies import read_body
from mediamesh.gateway.http.compressed_bodies import content_encoding, inflated
from mediamesh.gateway.http.context import Authorization, context_of
from mediamesh.gateway.http.disconnects import unless_client_leaves

router = APIRouter(tags=["Open Inference Protocol"])
# The protocol answers a false probe with a 4xx status, as Triton does.
_NOT_READY = 400
_MODEL = "/v2/models/{model}"
_VERSIONED = "/v2/models/{model}/versions/{version}"


@router.get("/v2/health/live", summary="Server live")
async def server_live() -> JSONResponse:
    """200 while the gateway serves (no API key needed)."""
    return JSONResponse({"live": True})


@router.get("/v2/health/ready", summary="Server ready")
async def server_ready(request: Request) -> JSONResponse:
    """200 when some model is ready in the mesh, else 400 (no API key needed)."""
    ready = bool(await context_of(request).plane.inference.ready_models())
    return JSONResponse({"ready": ready}, status_code=200 if ready else _NOT_READY)


@router.get("/v2", summary="Server metadata")
async def server_metadata(request: Request, authorization: Authorization = None) -> JSONResponse:
    """The server's name, mediamesh version and the protocol extensions it serves."""
    plane = context_of(request).plane
    plane.reader(authorization)
    return JSONResponse(plane.inference.server_metadata())


@router.get("/v2/models/stats", summary="Statistics of every model")
@router.get(_MODEL + "/stats", summary="Model statistics")
@router.get(_VERSIONED + "/stats", summary="Model statistics (a version)")
async def model_statistics_route(
    request: Request, authorization: Authorization = None
) -> JSONResponse:
    """Counts and phase durations since the scheduler started (Triton's statistics
    extension): the caller's tenant's jobs, every tenant's for an admin key; 404 for an
    unknown model or version. Declared before the model metadata, whose path would take
    `stats` for a model's name."""
    plane = context_of(request).plane
    caller = plane.reader(authorization)
    # From the path alone: "/v2/models/stats" has no model, and a query must not name one.
    model = str(request.path_params.get("model", ""))
    return JSONResponse(await plane.inference.statistics(caller, model, _version(request)))


@router.get(_MODEL, summary="Model metadata")
@router.get(_VERSIONED, summary="Model metadata (a version)")
async def model_metadata_route(
    request: Request, model: str, authorization: Authorization = None
) -> JSONResponse:
    """The model's input and output tensors; 404 for an unknown model or version."""
    plane = context_of(request).plane
    plane.reader(authorization)
    return JSONResponse(model_metadata(plane.inference.model(model, _version(request))))


@router.get(_MODEL + "/config", summary="Model configuration")
@router.get(_VERSIONED + "/config", summary="Model configuration (a version)")
async def model_config_route(
    request: Request, model: str, authorization: Authorization = None
) -> JSONResponse:
    """The model as Triton's model configuration describes one; 404 for an unknown model
    or version."""
    plane = context_of(request).plane
    plane.reader(authorization)
    return JSONResponse(model_config(plane.inference.model(model, _version(request))))


@router.post("/v2/repository/index", summary="Repository index")
async def repository_index_route(
    request: Request, authorization: Authorization = None
) -> JSONResponse:
    """Every model with its state, READY or UNAVAILABLE and why; with `{"ready": true}` as
    the body, only the ready ones."""
    context = context_of(request)
    plane = context.plane
    plane.reader(authorization)
    body = await read_body(request, context.max_body_bytes)
    ready_only = parse_index_request(body)
    index = await plane.inference.repository_index("", ready_only)
    return JSONResponse(index)


@router.get(_MODEL + "/ready", summary="Model ready")
@router.get(_VERSIONED + "/ready", summary="Model ready (a version)")
async def model_ready(
    request: Request, model: str, authorization: Authorization = None
) -> JSONResponse:
    """200 when the model is ready in the mesh, else 400; an unknown model is not ready."""
    plane = context_of(request).plane
    plane.reader(authorization)
    try:
        plane.inference.model(model, _version(request))
    except NotFound:
        ready = False
    else:
        ready = model in await plane.inference.ready_models()
    return JSONResponse({"name": model, "ready": ready}, status_code=200 if ready else _NOT_READY)


@router.post(_MODEL + "/infer", summary="Inference")
@router.post(_VERSIONED + "/infer", summary="Inference (a version)")
async def infer(request: Request, model: str, authorization: Authorization = None) -> Response:
    """Runs each element of the `prompt` input as one job and answers with the outputs, the
    media one raw (the binary tensor data extension). The jobs are cancelled if the client
    goes away."""
    context = context_of(request)
    plane = context.plane
    caller = plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals(plane.queue_of(model)):
        spec = plane.inference.model(model, _version(request))
        # Before the body is read: one in an encoding the gateway cannot read is refused
        # whole.
        encoding = content_encoding(request.headers.get("content-encoding"))
        compressed = await read_body(request, context.max_body_bytes)
        # tritonclient.http compresses with request_compression_algorithm, as Triton reads.
        body = inflated(compressed, encoding, context.max_body_bytes)
        parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH))
    # Cancelled with the client: the call's jobs are then cancelled too (kserve_jobs.py).
    outputs = await unless_client_leaves(request, plane.inference.infer(caller, spec, parsed))
    content, json_length = encode_infer_response(spec.name, parsed, outputs)
    if json_length is None:
        return Response(content, media_type="application/json")
    return Response(
        content,
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(json_length)},
    )


# Triton's extensions the mesh does not offer, and why. Their routes answer as Triton does
# for an extension it was built without, UNSUPPORTED, which it sends as 501 Not Implemented
# (and gRPC's UNIMPLEMENTED, what the same calls get on the gateway's gRPC port), rather
# than a 404 that reads as a wrong URL or an unknown model.
_NOT_OFFERED = {
    "model_repository": (
        "of the repository only the index is served; which models a worker holds is its "
        "registry and residency settings"
    ),
    "system_shared_memory": "send each tensor's data in the request body",
    "cuda_shared_memory": "send each tensor's data in the request body",
}
_SHARED_MEMORY_ROUTES = (
    ("GET", "/status"),
    ("GET", "/region/{region}/status"),
    ("POST", "/region/{region}/register"),
    ("POST", "/region/{region}/unregister"),
    ("POST", "/unregister"),
)
NOT_OFFERED_ROUTES = (
    ("POST", "/v2/repository/models/{model}/load", "model_repository"),
    ("POST", "/v2/repository/models/{model}/unload", "model_repository"),
    *(
        (method, f"/v2/{kind}sharedmemory{path}", f"{kind}_shared_memory")
        for kind in ("system", "cuda")
        for method, path in _SHARED_MEMORY_ROUTES
    ),
)


def _not_offered(extension: str) -> Callable[[], Awaitable[Response]]:
    """The route of a call of `extension`: always UNIMPLEMENTED (501), saying why."""

    async def route() -> Response:
        raise MeshError(
            f"the mesh does not offer Triton's {extension} extension: "
            f"{_NOT_OFFERED[extension]} (GET /v2 lists the extensions it serves)",
            code=StatusCode.UNIMPLEMENTED,
        )

    return route


def _add_not_offered_routes() -> None:
    # Out of the API's schema: the docs page lists what the gateway serves.
    for method, path, extension in NOT_OFFERED_ROUTES:
        router.add_api_route(
            path, _not_offered(extension), methods=[method], include_in_schema=False
        )


_add_not_offered_routes()


def _version(request: Request) -> str:
    """The path's model version; "" on the routes without one (a path parameter, never a
    query one)."""
    return str(request.path_params.get("version", ""))
