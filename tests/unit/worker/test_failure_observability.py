"""A worker's failures show in its traces, metrics and logs.

Before, the `run batch` span stayed UNSET whatever happened to the batch, jobs the worker
refused before running them (a model it does not host, steps past the model's limit) were
missing from `mediamesh_worker_jobs_total`, and a failed job's log line named neither the
job, its batch nor its trace.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode as SpanStatus
from prometheus_client import REGISTRY

from mediamesh.common.errors import InvalidArgument, StatusCode
from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFailed, JobParams
from mediamesh.worker import runtime as runtime_module
from mediamesh.worker.core.batch import BatchControl, DeviceGroupLost, Emit
from mediamesh.worker.job_log import batch_logging, log_failed_jobs
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.progress import Terminals
from mediamesh.worker.runtime import WorkerRuntime
from tests.span_recording import recorded_spans

ECHO = load_registry().get("echo")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CARRIER = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}


def job(job_id: str, **change: object) -> JobParams:
    generation = GenerationParams(prompt="x", steps=2, width=16, height=16)
    return JobParams(job_id, dataclasses.replace(generation, **change))


class ScriptedHost:
    """A host whose batches end as told: each job failed with `code`, or the batch raises."""

    def __init__(self, code: str = "", raises: BaseException | None = None) -> None:
        assert ECHO is not None
        self.spec = ECHO
        self.device_ids = ["cpu"]
        self.code = code
        self.raises = raises

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        if self.raises is not None:
            raise self.raises
        for params in jobs:
            emit(JobFailed(params.job_id, self.code, "it went wrong"))

    def close(self) -> None:
        return None


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The worker's spans, recorded in memory (the process's own provider is left alone)."""
    yield from recorded_spans(monkeypatch, runtime_module)


def batch_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "run batch"]
    return span


def worker_jobs(model: str, code: str) -> float:
    labels = {"model": model, "code": code}
    return REGISTRY.get_sample_value("mediamesh_worker_jobs_total", labels) or 0.0


async def run(runtime: WorkerRuntime, model: str, jobs: list[JobParams]) -> list[object]:
    batch = runtime.run_batch("b-1", model, jobs, trace_carrier=CARRIER)
    return [event async for event in batch]


@pytest.mark.parametrize("code", ["INTERNAL", "UNAVAILABLE"])
async def test_a_job_failed_by_the_worker_sets_the_batch_span_to_error(spans, code) -> None:
    runtime = WorkerRuntime("w", "on-demand", {"echo": ScriptedHost(code)})
    try:
        await run(runtime, "echo", [job("a"), job("b")])
    finally:
        runtime.close()
    status = batch_span(spans).status
    assert status.status_code is SpanStatus.ERROR
    assert status.description == f"job a failed: {code}: it went wrong"


@pytest.mark.parametrize("code", ["INVALID_ARGUMENT", "FAILED_PRECONDITION", "CANCELLED"])
async def test_a_job_failed_for_what_it_asked_leaves_the_span_unset(spans, code) -> None:
    runtime = WorkerRuntime("w", "on-demand", {"echo": ScriptedHost(code)})
    try:
        await run(runtime, "echo", [job("a")])
    finally:
        runtime.close()
    assert batch_span(spans).status.status_code is SpanStatus.UNSET


async def test_a_batch_that_raises_records_the_exception_on_its_span(spans) -> None:
    lost = DeviceGroupLost("tensor-parallel group of echo is down")
    runtime = WorkerRuntime("w", "on-demand", {"echo": ScriptedHost(raises=lost)})
    try:
        with pytest.raises(DeviceGroupLost):
            await run(runtime, "echo", [job("a")])
    finally:
        runtime.close()
    span = batch_span(spans)
    assert span.status.status_code is SpanStatus.ERROR
    assert "tensor-parallel group of echo is down" in (span.status.description or "")
    assert [e.name for e in span.events] == ["exception"]


async def test_jobs_refused_before_they_run_are_counted_and_logged(caplog) -> None:
    runtime = WorkerRuntime("w", "on-demand", {"echo": ScriptedHost("INTERNAL")})
    caplog.set_level(logging.INFO, logger="mediamesh.worker")
    not_hosted = worker_jobs("flux-tiny", "FAILED_PRECONDITION")
    too_many_steps = worker_jobs("echo", "INVALID_ARGUMENT")
    try:
        await run(runtime, "flux-tiny", [job("elsewhere")])
        await run(runtime, "echo", [job("endless", steps=2**32 - 1)])
    finally:
        runtime.close()
    assert worker_jobs("flux-tiny", "FAILED_PRECONDITION") == not_hosted + 1
    assert worker_jobs("echo", "INVALID_ARGUMENT") == too_many_steps + 1
    lines = {
        r.fields["job_id"]: (r.levelno, r.fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if "job_id" in getattr(r, "fields", {})
    }
    level, fields = lines["endless"]
    assert level == logging.WARNING
    assert fields["batch_id"] == "b-1"
    assert fields["code"] == "INVALID_ARGUMENT"
    assert fields["trace_id"] == TRACE_ID
    assert lines["elsewhere"][1]["code"] == "FAILED_PRECONDITION"


class LoggingHost(ScriptedHost):
    """Fails its jobs the way DiffusionHost does, logging them from the device thread."""

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        log_failed_jobs(
            logging.getLogger("test.host"),
            "echo",
            [j.job_id for j in jobs],
            self.raises or RuntimeError("x"),
        )


async def test_the_device_thread_logs_name_the_batch_and_its_trace(caplog) -> None:
    runtime = WorkerRuntime("w", "on-demand", {"echo": LoggingHost(raises=RuntimeError("boom"))})
    caplog.set_level(logging.INFO, logger="test.host")
    try:
        await run(runtime, "echo", [job("a")])
    finally:
        runtime.close()
    (record,) = [r for r in caplog.records if r.name == "test.host"]
    assert record.fields["batch_id"] == "b-1"  # type: ignore[attr-defined]
    assert record.fields["trace_id"] == TRACE_ID  # type: ignore[attr-defined]


def diffusion_host() -> DiffusionHost:
    """A DiffusionHost without a pipeline: enough for its failure paths."""
    host = DiffusionHost.__new__(DiffusionHost)
    spec = load_registry().get("flux-img2img-tiny")
    assert spec is not None
    host.spec = spec
    # Failure paths ask whether the devices still work (an AcceleratorError probes them).
    host.device_ids = ["cpu"]
    return host


def failed_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mediamesh.worker.models.diffusion"]


def test_an_unexpected_failure_is_an_error_per_job_with_ids_and_one_traceback(caplog) -> None:
    events: list[object] = []
    try:
        raise RuntimeError("CUDA error: an illegal memory access")
    except RuntimeError as exc:
        error = exc
    with batch_logging("b-7", CARRIER):
        diffusion_host()._fail_group([job("a"), job("b")], Terminals(events.append), error)
    a, b = failed_lines(caplog)
    assert (a.levelno, b.levelno) == (logging.ERROR, logging.ERROR)
    assert a.exc_info is not None and b.exc_info is None
    for record, job_id in ((a, "a"), (b, "b")):
        fields = record.fields  # type: ignore[attr-defined]
        assert fields["job_id"] == job_id
        assert fields["batch_id"] == "b-7"
        assert fields["code"] == StatusCode.INTERNAL
        assert fields["trace_id"] == TRACE_ID
    assert [e.code for e in events] == ["INTERNAL", "INTERNAL"]  # type: ignore[attr-defined]


def test_a_failure_the_caller_caused_is_a_warning_without_traceback(caplog) -> None:
    events: list[object] = []
    refused = InvalidArgument("adapters: 'sketchy' fits no layer of flux-img2img-tiny")
    with batch_logging("b-8", CARRIER):
        diffusion_host()._fail_group([job("a")], Terminals(events.append), refused)
    (line,) = failed_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.exc_info is None
    assert line.fields["code"] == "INVALID_ARGUMENT"  # type: ignore[attr-defined]
    assert line.fields["batch_id"] == "b-8"  # type: ignore[attr-defined]


def test_a_batch_that_raises_logs_each_job_it_fails(caplog, monkeypatch) -> None:
    host = diffusion_host()

    def broken(jobs: list[JobParams], control: object, terminals: Terminals) -> None:
        terminals.send("a", JobFailed("a", "CANCELLED", "cancelled at step 0"))
        raise RuntimeError("broken")

    monkeypatch.setattr(host, "_run", broken)
    events: list[object] = []
    with batch_logging("b-9", CARRIER):
        host.run_batch([job("a"), job("b")], BatchControl(["a", "b"]), events.append)
    # Job "a" had ended already: only "b" failed by the exception.
    (line,) = failed_lines(caplog)
    assert line.fields["job_id"] == "b"  # type: ignore[attr-defined]
    assert line.levelno == logging.ERROR and line.exc_info is not None
