"""Each job's log lines carry its own trace id, also after a restart (issue 13, item 11).

Before, a line took the trace id of whatever span was current where the state change was
applied: another job's Submit, the first job of a batch, or none in the dispatch loop; and
a restarted scheduler had no trace for the jobs it took back from the store.
"""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.scheduler.core.jobs import JobState
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.mesh.test_store_durability import until

TRACES = {"first": "4bf92f3577b34da6a3ce929d0e0e4736", "second": "0af7651916cd43dd8448eb211c80319c"}


def job_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, str]]:
    """The structured fields of every scheduler log line about one job."""
    return [
        record.fields  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "mediamesh.scheduler" and "job_id" in getattr(record, "fields", {})
    ]


async def submit_under(mesh: InProcessMesh, trace_id: str, prompt: str) -> str:
    """Submit straight to the scheduler, as a gateway in that trace would."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}") as channel:
        handle = await scheduler_pb2_grpc.SchedulerStub(channel).Submit(
            scheduler_pb2.SubmitRequest(
                tenant="acme", request=common_pb2.GenerateRequest(model="echo", prompt=prompt)
            ),
            metadata=(("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),),
            timeout=10,
        )
    return handle.job_id


async def queued_then_stopped(tmp_path: Path, models_dir: Path) -> dict[str, str]:
    """A job per trace submitted to a mesh without workers, which is then stopped with them
    still queued; job id -> trace id."""
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        return {await submit_under(mesh, t, name): t for name, t in TRACES.items()}
    finally:
        await stop_mesh(mesh)


async def test_every_line_about_a_job_carries_its_own_trace_id_across_a_restart(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # DEBUG: dispatch lines, written by whichever task forms the batch, are the hard case.
    caplog.set_level(logging.DEBUG, logger="mediamesh.scheduler")
    # No worker yet: both jobs wait in the queue through the restart.
    trace_of = await queued_then_stopped(tmp_path, models_dir)
    before = job_lines(caplog)
    assert sorted(line["job_id"] for line in before) == sorted(trace_of)
    caplog.clear()
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        await until(lambda: all(mesh.core.jobs[j].state is JobState.SUCCEEDED for j in trace_of))
    finally:
        await stop_mesh(mesh)
    after = job_lines(caplog)
    assert {(line["job_id"], line["state"]) for line in after} >= {
        (job_id, state) for job_id in trace_of for state in ("DISPATCHED", "SUCCEEDED")
    }
    for line in before + after:
        assert line.get("trace_id") == trace_of[line["job_id"]], line


async def test_a_line_never_takes_the_trace_of_the_span_current_where_it_is_logged(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        trace_of = {await submit_under(mesh, t, name): t for name, t in TRACES.items()}
        caplog.clear()
        # Another request's span is current while both jobs end (an operator's cancel).
        other = SpanContext(int("5" * 32, 16), int("6" * 16, 16), is_remote=False)
        with trace.use_span(NonRecordingSpan(other)):
            for job_id in trace_of:
                await mesh.scheduler.runtime.cancel(job_id, "acme")
    finally:
        await stop_mesh(mesh)
    lines = job_lines(caplog)
    assert sorted(line["job_id"] for line in lines) == sorted(trace_of)
    for line in lines:
        assert line.get("trace_id") == trace_of[line["job_id"]], line


async def test_at_info_a_job_logs_its_acceptance_and_its_end_only(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        job_id = await submit_under(mesh, TRACES["first"], "x")
        await until(lambda: mesh.core.jobs[job_id].state is JobState.SUCCEEDED)
    finally:
        await stop_mesh(mesh)
    states = [line["state"] for line in job_lines(caplog) if line["job_id"] == job_id]
    assert states == ["QUEUED", "SUCCEEDED"]
    end = next(line for line in job_lines(caplog) if line["state"] == "SUCCEEDED")
    assert end["worker"] and end["batch"], end


async def test_a_gateway_that_does_not_trace_forwards_its_callers_trace(
    tmp_path: Path, models_dir: Path
) -> None:
    # Neither gateway nor scheduler traces here: only the caller's own traceparent can name
    # the job's trace, so the gateway must pass it on with every call that makes a job.
    mesh = await start_mesh(tmp_path, models_dir, [], gateway={"http_port": 0})
    try:
        stub = mesh.gateway_stub()
        parent = "00f067aa0ba902b7"
        ids = {}
        for name, trace_id in TRACES.items():
            header = (("traceparent", f"00-{trace_id}-{parent}-01"),)
            request = common_pb2.GenerateRequest(model="echo", prompt=name)
            if name == "first":
                ids[trace_id] = (await stub.Submit(request, metadata=header, timeout=10)).job_id
            else:
                stream = stub.Generate(request, metadata=header, timeout=10)
                ids[trace_id] = (await stream.read()).job_id
                stream.cancel()
        third = "5c4d2b1a0f9e8d7c6b5a493827161504"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{mesh.gateway.http_port}") as http:
            made = await http.post(
                "/v1/jobs",
                json={"model": "echo", "prompt": "third"},
                headers={"traceparent": f"00-{third}-{parent}-01"},
            )
        assert made.status_code == 202, made.text
        ids[third] = made.json()["job_id"]
        untraced = await stub.Submit(common_pb2.GenerateRequest(model="echo", prompt="none"))
        for trace_id, job_id in ids.items():
            carrier = mesh.core.jobs[job_id].trace_carrier
            assert carrier["traceparent"].split("-")[1] == trace_id, (trace_id, carrier)
        assert mesh.core.jobs[untraced.job_id].trace_carrier == {}
    finally:
        await stop_mesh(mesh)


async def test_a_restarted_scheduler_logs_each_job_it_takes_back(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    trace_of = await queued_then_stopped(tmp_path, models_dir)
    caplog.clear()
    mesh = await start_mesh(tmp_path, models_dir, [])
    await stop_mesh(mesh)
    recovered = [
        record
        for record in caplog.records
        if getattr(record, "fields", {}).get("reason") == "recovered after a scheduler restart"
    ]
    assert sorted(r.fields["job_id"] for r in recovered) == sorted(trace_of)  # type: ignore[attr-defined]
    for record in recovered:
        line = record.fields  # type: ignore[attr-defined]
        assert record.levelno == logging.INFO and record.name == "mediamesh.scheduler"
        assert line["state"] == "QUEUED" and line["previous_state"] == "QUEUED", line
        assert line["attempt"] == 0 and line["trace_id"] == trace_of[line["job_id"]], line
