"""One request, one trace: gateway, scheduler (queue wait, batch) and worker (steps)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as kserve_pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as kserve_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc
from mediamesh.common.telemetry import JOB_LINK_EXCHANGE_SPAN
from tests.e2e.conftest import stop

pytestmark = pytest.mark.e2e


def read_spans(folder: Path) -> list[dict]:
    spans = []
    for path in folder.glob("spans-*.jsonl"):
        spans.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return spans


def test_a_call_is_one_trace_across_three_processes_natively_and_over_kserve(
    launch, tmp_path: Path
):
    mesh = launch(
        [{"models": ["flux-tiny"]}],
        telemetry={"traces": "file", "trace_file": str(tmp_path / "spans-{service}.jsonl")},
    )
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = common_pb2.GenerateRequest(model="flux-tiny", prompt="trace me", steps=3)
        events = list(stub.Generate(request, timeout=60))
        prompt = kserve_pb.ModelInferRequest.InferInputTensor(
            name="prompt",
            datatype="BYTES",
            shape=[1],
            contents=kserve_pb.InferTensorContents(bytes_contents=[b"trace me too"]),
        )
        inference = kserve_grpc.GRPCInferenceServiceStub(channel)
        inference.ModelInfer(
            kserve_pb.ModelInferRequest(model_name="flux-tiny", inputs=[prompt]), timeout=60
        )
    assert events[-1].HasField("result")
    stop(mesh)

    spans = read_spans(tmp_path)
    generate = next(s for s in spans if s["name"] == "/mediamesh.v1.Gateway/Generate")
    trace_id = generate["context"]["trace_id"]
    in_trace = [s for s in spans if s["context"]["trace_id"] == trace_id]
    by_service = {(s["resource"]["attributes"]["service.name"], s["name"]) for s in in_trace}
    # The job goes over the gateway's JobLink stream: each end has a span for its exchange,
    # in the call's trace; the stream itself, which outlives every call, has none.
    assert ("gateway", JOB_LINK_EXCHANGE_SPAN) in by_service  # client side
    assert ("scheduler", JOB_LINK_EXCHANGE_SPAN) in by_service
    assert ("scheduler", "queue wait") in by_service
    assert ("scheduler", "batch") in by_service
    assert ("worker worker-0", "/mediamesh.v1.Worker/RunBatch") in by_service
    run = next(s for s in in_trace if s["name"] == "run batch")
    steps = [e for e in run["events"] if e["name"] == "StepDone"]
    assert [e["attributes"]["mediamesh.step"] for e in steps] == [1, 2, 3]

    # A KServe call's job too.
    infer = next(s for s in spans if s["name"] == "/inference.GRPCInferenceService/ModelInfer")
    trace_id = infer["context"]["trace_id"]
    in_trace = [s for s in spans if s["context"]["trace_id"] == trace_id]
    by_service = {(s["resource"]["attributes"]["service.name"], s["name"]) for s in in_trace}
    assert ("gateway", JOB_LINK_EXCHANGE_SPAN) in by_service
    assert ("scheduler", JOB_LINK_EXCHANGE_SPAN) in by_service
    assert ("scheduler", "queue wait") in by_service
    assert ("worker worker-0", "/mediamesh.v1.Worker/RunBatch") in by_service
    assert not [s for s in spans if s["name"] == "/mediamesh.v1.Scheduler/JobLink"]
