"""Triton's statistics extension on the inference protocol: the scheduler's per-model counts
(scheduler/core/model_statistics.py), as `ModelStatistics` messages over gRPC and as the
extension's JSON over HTTP.

A caller sees its own tenant's jobs; a key with the admin scope sees every tenant's. The
mesh keeps no response cache, so `cache_hit` and `cache_miss` stay zero, and no decoupled
models, so `response_stats` stays empty. Memory usage is not reported.
"""

from __future__ import annotations

from typing import Any

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.v1 import scheduler_pb2
from mediamesh.gateway.api.dataplane import UNARY_TIMEOUT_S
from mediamesh.gateway.api.upstream import Upstream, mesh_errors
from mediamesh.gateway.core.inference_call import MODEL_VERSION
from mediamesh.gateway.core.tenancy import Caller

# The per-request phases of InferStatistics that the scheduler counts, by the same names.
_PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
_BATCH_PHASES = ("compute_input", "compute_infer", "compute_output")


async def model_statistics(up: Upstream, caller: Caller, name: str) -> pb.ModelStatisticsResponse:
    """The statistics of `name`, a registry model (every model for ""), as `caller` may see
    them."""
    request = scheduler_pb2.ScopedModelStatisticsRequest(
        models=[name] if name else [], tenant=caller.tenant, admin=caller.admin
    )
    async with mesh_errors():
        reply = await up.scheduler.ModelStatistics(request, timeout=UNARY_TIMEOUT_S)
    return pb.ModelStatisticsResponse(model_stats=[_triton(model) for model in reply.models])


def _duration(phase: scheduler_pb2.PhaseDuration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=phase.count, ns=phase.ns)


def _triton(model: scheduler_pb2.ModelStatistics) -> pb.ModelStatistics:
    inference = pb.InferStatistics(
        **{phase: _duration(getattr(model, phase)) for phase in _PHASES},
        cache_hit=pb.StatisticDuration(),
        cache_miss=pb.StatisticDuration(),
    )
    return pb.ModelStatistics(
        name=model.model,
        version=MODEL_VERSION,
        last_inference=model.last_inference_unix_ms,
        inference_count=model.inference_count,
        execution_count=model.execution_count,
        inference_stats=inference,
        batch_stats=[
            pb.InferBatchStatistics(
                batch_size=sized.batch_size,
                **{phase: _duration(getattr(sized, phase)) for phase in _BATCH_PHASES},
            )
            for sized in model.batch_sizes
        ],
    )


def _duration_json(duration: pb.StatisticDuration) -> dict[str, int]:
    return {"count": duration.count, "ns": duration.ns}


def statistics_json(response: pb.ModelStatisticsResponse) -> dict[str, Any]:
    """The extension's HTTP body for `response`: every field present, numbers as numbers
    (protobuf's own JSON writes 64-bit integers as strings)."""
    models = []
    for model in response.model_stats:
        inference = model.inference_stats
        models.append(
            {
                "name": model.name,
                "version": model.version,
                "last_inference": model.last_inference,
                "inference_count": model.inference_count,
                "execution_count": model.execution_count,
                "inference_stats": {
                    phase: _duration_json(getattr(inference, phase))
                    for phase in (*_PHASES, "cache_hit", "cache_miss")
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": sized.batch_size,
                        **{phase: _duration_json(getattr(sized, phase)) for phase in _BATCH_PHASES},
                    }
                    for sized in model.batch_stats
                ],
                "memory_usage": [],
            }
        )
    return {"model_stats": models}
