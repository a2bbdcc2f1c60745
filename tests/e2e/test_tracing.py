"""One request, one trace: gateway, scheduler (queue wait, batch) and worker (steps)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as kserve_pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as kserve_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc
from mediamesh.common.telemetry import BATCH_LINK_BATCH_SPAN, JOB_LINK_EXCHANGE_SPAN
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
    # The batch goes over the scheduler's BatchLink stream to the worker, the same way.
    assert ("scheduler", BATCH_LINK_BATCH_SPAN) in by_service  # client side
    assert ("worker worker-0", BATCH_LINK_BATCH_SPAN) in by_service
    # batch -> its link span (scheduler) -> its link span (worker) -> run batch.
    by_id = {s["context"]["span_id"]: s for s in in_trace}
    run = next(s for s in in_trace if s["name"] == "run batch")
    chain = [run]
    while chain[-1].get("parent_id") in by_id and len(chain) < 4:
        chain.append(by_id[chain[-1]["parent_id"]])
    assert [(s["resource"]["attributes"]["service.name"], s["name"]) for s in chain] == [
        ("worker worker-0", "run batch"),
        ("worker worker-0", BATCH_LINK_BATCH_SPAN),
        ("scheduler", BATCH_LINK_BATCH_SPAN),
        ("scheduler", "batch"),
    ]
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
    assert ("worker worker-0", BATCH_LINK_BATCH_SPAN) in by_service
    for stream in ("/mediamesh.v1.Scheduler/JobLink", "/mediamesh.v1.Worker/BatchLink"):
        assert not [s for s in spans if s["name"] == stream]
