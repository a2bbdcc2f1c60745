"""Dashboard panels whose queries once misread their metric.

- "Device busy ratio" averaged a 0/1 gauge sampled at scrapes; it reads the busy-seconds
  counter's rate, which counts every hold between scrapes.
- "RPC latency p95 by method" took in the streams that last a worker's, a job's or a batch's
  lifetime, whose observations sit past the top bucket and pinned the line at 300 s, and the
  transfers (Download, Upload), timed by a file's size over the client's bandwidth.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from queries import dashboard_panels

PROTOS = Path(__file__).resolve().parents[3] / "protos"
# Streams whose duration is that of what they follow: the panel leaves them out.
LIFETIME_STREAMS = {
    "Attach",
    "Generate",
    "Watch",
    "SubmitAndWatch",
    "JobLink",
    "RunBatch",
    "BatchLink",
    "ModelStreamInfer",
}
# Streams bounded by the bytes they carry: their time is the file's size over the client's
# bandwidth, not the server's handling, so the panel leaves them out too.
TRANSFER_STREAMS = {"Download", "Upload"}


def panel(title: str) -> dict:
    (found,) = [p for p in dashboard_panels() if p.get("title") == title]
    return found


def expr_of(title: str) -> str:
    (target,) = panel(title)["targets"]
    return target["expr"]


def streaming_methods() -> set[str]:
    """Every RPC of the protos with `stream` on either side."""
    found = set()
    for path in PROTOS.rglob("*.proto"):
        for name, request, response in re.findall(
            r"rpc\s+(\w+)\s*\(([^)]*)\)\s*returns\s*\(([^)]*)\)", path.read_text()
        ):
            if "stream " in f"{request} " or "stream " in f"{response} ":
                found.add(name)
    return found


def test_device_busy_is_the_rate_of_the_busy_seconds_counter() -> None:
    expr = expr_of("Device busy ratio")
    assert "rate(mediamesh_worker_device_busy_seconds_total[" in expr
    assert "mediamesh_worker_device_busy_ratio" not in expr


def test_every_stream_is_classified() -> None:
    # A new stream must be put in one class or the other before the panel is trusted again.
    assert streaming_methods() == LIFETIME_STREAMS | TRANSFER_STREAMS


@pytest.mark.parametrize("method", sorted(LIFETIME_STREAMS | TRANSFER_STREAMS))
def test_rpc_latency_leaves_out_streams(method: str) -> None:
    expr = expr_of("RPC latency p95 by method")
    (excluded,) = re.findall(r'method!~"([^"]*)"', expr)
    # PromQL anchors label regexes: the whole method name must match.
    assert re.fullmatch(excluded, method)
    assert method in panel("RPC latency p95 by method")["description"]


@pytest.mark.parametrize("method", ["Submit", "GetJob", "Cancel", "ModelInfer"])
def test_rpc_latency_keeps_calls_with_a_bounded_answer(method: str) -> None:
    (excluded,) = re.findall(r'method!~"([^"]*)"', expr_of("RPC latency p95 by method"))
    assert not re.fullmatch(excluded, method)
