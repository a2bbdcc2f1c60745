"""Logging and OpenTelemetry tracing, configured once per process from settings."""

from __future__ import annotations

import functools
import json
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mediamesh.common.errors import StatusCode
from mediamesh.common.settings import TelemetrySettings
from mediamesh.common.span_redaction import QueryRedaction

log = logging.getLogger(__name__)

_tracing_enabled = False
# Kept to cut its exports short at shutdown when the collector does not answer.
_otlp_exporter: SpanExporter | None = None
# The most that `shutdown_tracing` waits for the last spans to be exported.
TRACING_SHUTDOWN_TIMEOUT_S = 2.5
# Events one span keeps: a worker's `run batch` span has one per job and denoising step
# (16 jobs of 50 steps: 800). OpenTelemetry's default of 128 kept only the last ones, so a
# batch's first steps went missing from its trace.
MAX_SPAN_EVENTS = 8192
# W3C trace context alone (no baggage): what a request's trace is taken from.
_TRACE_CONTEXT = TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"


class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span as one JSON line, for tests and offline inspection."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock, self._path.open("a") as out:
            for span in spans:
                out.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# Line breaks and other control characters in a text log line, escaped as Python writes them
# in a string: a value a caller chose (a prompt, an id, a header) that held "\n2026-01-01
# gateway INFO ..." would otherwise forge a line of its own. Tabs stay.
_ESCAPES = {
    code: ascii(chr(code))[1:-1]
    for code in (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
    if code != 0x09
}


def escape_controls(text: str) -> str:
    """`text` with its control characters and line separators escaped (`\n`, `\x1b`)."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """One line per record: its message and fields with control characters escaped, so that
    no value can start a line of its own; a traceback follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = escape_controls(super().formatMessage(record))
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={escape_controls(str(v))}" for k, v in fields.items())
        return line


# How this process logs, for the processes it spawns (a tensor group's helper ranks), which
# start with Python's bare defaults: (log_format, log_level, service).
_logging_setup: tuple[str, str, str] | None = None


def setup_logging(settings: TelemetrySettings, service: str) -> None:
    configure_logging(settings.log_format, settings.log_level, service)


def configure_logging(log_format: str, log_level: str, service: str) -> None:
    """Every record of the process through one handler in the configured format, Python's
    warnings included: a log shipper reading JSON lines must get nothing else."""
    global _logging_setup
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(f"%(asctime)s {service} %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(log_level.upper())
    logging.captureWarnings(True)
    _logging_setup = (log_format, log_level, service)


def inherited_logging(suffix: str) -> tuple[str, str, str] | None:
    """What a spawned process passes to `configure_logging` to log as this one does, its
    service named with `suffix`; None when this process set up no logging."""
    if _logging_setup is None:
        return None
    log_format, log_level, service = _logging_setup
    return log_format, log_level, f"{service} {suffix}"


def setup_tracing(settings: TelemetrySettings, service: str) -> None:
    global _tracing_enabled, _otlp_exporter
    if settings.traces == "none":
        return
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        span_limits=SpanLimits(max_events=MAX_SPAN_EVENTS),
    )
    provider.add_span_processor(QueryRedaction())  # before any exporter sees a span
    exporter: SpanExporter
    if settings.traces == "console":
        exporter = ConsoleSpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.traces == "file":
        if settings.trace_file is None:
            raise ValueError("telemetry.trace_file is required when telemetry.traces is 'file'")
        # One file per process ({service} in the path), so writers never interleave lines.
        path = Path(str(settings.trace_file).replace("{service}", service.replace(" ", "-")))
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        # Its timeout is in seconds; never 0, which it would take for unset and replace with
        # the OpenTelemetry variables read as seconds (the setting's bounds keep it over 0).
        exporter = OTLPSpanExporter(
            endpoint=settings.otlp_endpoint,
            insecure=True,
            timeout=settings.otlp_export_timeout_s,
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        _otlp_exporter = exporter
    trace.set_tracer_provider(provider)
    _tracing_enabled = True


def shutdown_tracing(timeout_s: float = TRACING_SHUTDOWN_TIMEOUT_S) -> None:
    """Export the spans still queued, giving up after `timeout_s`, and stop tracing."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return
    # In a thread so that the wait is bounded: the SDK's batch processor ignores
    # force_flush's timeout, and waits for an export in flight however long it retries.
    flushing = threading.Thread(
        target=provider.force_flush,
        args=(int(timeout_s * 1000),),
        name="flush spans",
        daemon=True,
    )
    flushing.start()
    flushing.join(timeout_s)
    if flushing.is_alive() and _otlp_exporter is not None:
        log.warning("spans not exported within %.1f s dropped at exit", timeout_s)
        # Closes its channel, failing the export in flight, and ends its retries at once;
        # what is still queued then fails without waiting too.
        _otlp_exporter.shutdown()
    provider.shutdown()


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


# The span of one JobLink exchange, on either end (the gateway's CLIENT, the scheduler's
# SERVER): the pair a call per job would have had for its rpc.
JOB_LINK_EXCHANGE_SPAN = "/mediamesh.v1.Scheduler/JobLink exchange"
# The span of one batch on a BatchLink stream, on either end (the scheduler's CLIENT, the
# worker's SERVER): the pair a RunBatch call would have had.
BATCH_LINK_BATCH_SPAN = "/mediamesh.v1.Worker/BatchLink batch"
# The streams that outlive any request (JobLink carries many jobs' exchanges, BatchLink many
# batches, Attach a worker's whole connection): a span of one would last the process's life
# and join whichever request opened it. Their exchanges and batches make spans of their own.
UNTRACED_METHODS = ("JobLink", "BatchLink", "Attach")


def _traced_methods() -> Any:
    from opentelemetry.instrumentation.grpc import filters

    return filters.negate(filters.any_of(*[filters.method_name(m) for m in UNTRACED_METHODS]))


def server_tracing_interceptors() -> list[Any]:
    if not _tracing_enabled:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(filter_=_traced_methods())]


def client_tracing_interceptors() -> list[Any]:
    if not _tracing_enabled:
        return []
    import grpc
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    # No stream-stream interceptor: the mesh's only such calls are the untraced links above,
    # and any such interceptor, even one that filters the call out, makes grpc.aio send
    # `call.write()`s through a request generator of its own, which a call that dies with its
    # peer (a scheduler restarting) leaves pending: ERROR lines, "Task was destroyed but it
    # is pending", a task leaked per reconnect.
    return [
        interceptor
        for interceptor in aio_client_interceptors(filter_=_traced_methods())
        if not isinstance(interceptor, grpc.aio.StreamStreamClientInterceptor)
    ]


def current_trace_carrier() -> dict[str, str]:
    """The active trace context as W3C headers, to keep with a job until it is dispatched."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def span_trace_carrier(span: trace.Span) -> dict[str, str]:
    """`span`'s context as W3C headers, without making it current: a span held across an
    async generator's `yield` cannot be current, since the generator may be closed from
    another context, where detaching it fails."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def request_trace_carrier(metadata: Mapping[str, str | bytes]) -> dict[str, str]:
    """The trace a request belongs to, as W3C headers to keep with the job it creates.

    The active span's when this process traces; otherwise the caller's own `traceparent`
    (parsed and written again, so a malformed one is dropped, and nothing else the caller
    sent is kept), so that log lines still name the caller's trace when only it traces.
    """
    carrier = current_trace_carrier()
    if carrier:
        return carrier
    _TRACE_CONTEXT.inject(carrier, context=_TRACE_CONTEXT.extract(dict(metadata)))
    return {TRACEPARENT: carrier[TRACEPARENT]} if TRACEPARENT in carrier else {}


def forwarded_trace(headers: Mapping[str, str | bytes]) -> tuple[tuple[str, str], ...]:
    """The caller's `traceparent`, as metadata for this process's own calls on its behalf,
    when this process does not trace: a tracing one propagates its own span, a child of the
    caller's, through the client interceptor; one that does not would otherwise drop the
    caller's trace, and the next hop's log lines could not name it."""
    if _tracing_enabled:
        return ()
    carrier = request_trace_carrier(headers)
    return tuple(carrier.items())


def context_from(carrier: dict[str, str] | None) -> Context | None:
    return propagate.extract(carrier) if carrier else None


def trace_id_of(carrier: Mapping[str, str]) -> str:
    """The trace id (32 hex digits) in W3C headers, or "" when they carry none."""
    if not carrier:
        return ""
    return _trace_id_of_headers(tuple(sorted(carrier.items())))


# A job's headers never change and each of its state changes is logged: parse them once.
@functools.lru_cache(maxsize=4096)
def _trace_id_of_headers(headers: tuple[tuple[str, str], ...]) -> str:
    context = trace.get_current_span(propagate.extract(dict(headers))).get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def log_job(
    logger: logging.Logger,
    message: str,
    trace_carrier: Mapping[str, str],
    level: int = logging.INFO,
    *,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """One structured line about a job, with the trace id of the request that created it
    (and `exc_info`'s traceback when given).

    Never the active span's: a job's state changes are applied by whichever task learns of
    them (another job's Submit, a batch of several jobs, the dispatch loop).
    """
    if not logger.isEnabledFor(level):
        return
    trace_id = trace_id_of(trace_carrier)
    if trace_id:
        fields["trace_id"] = trace_id
    logger.log(level, message, exc_info=exc_info, extra={"fields": fields})


# The status codes that are the server's fault, after OpenTelemetry's gRPC conventions for
# SERVER spans: the others (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, CANCELLED,
# RESOURCE_EXHAUSTED, ...) answer a request that was wrong or came at a bad time, and left
# ERROR would page whoever watches the error rate for what callers did.
SERVER_FAULT_CODES = frozenset(
    {
        StatusCode.UNKNOWN,
        StatusCode.DEADLINE_EXCEEDED,
        StatusCode.UNIMPLEMENTED,
        StatusCode.INTERNAL,
        StatusCode.UNAVAILABLE,
        StatusCode.DATA_LOSS,
    }
)


def is_server_fault(code: str) -> bool:
    """Whether a job or call ended with `code` (a gRPC code name) by the server's fault."""
    return code in SERVER_FAULT_CODES


# The attribute opentelemetry-instrumentation-grpc sets on its SERVER spans (0 at the start).
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"


def record_unanswered_call(code: str, number: int) -> None:
    """The current SERVER span's status for a call that ended with no status set: one its
    client cancelled or whose deadline passed (`code`, gRPC's `number` for it).

    The gRPC instrumentation learns a code only from the handler setting one, so such a
    call's span kept the 0 (OK) it started with while the call counted CANCELLED in
    mediamesh_rpc_requests_total. Its status stays UNSET unless the code is the server's
    fault (DEADLINE_EXCEEDED is; CANCELLED, the client's choice, is not)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(RPC_GRPC_STATUS_CODE, number)
    if is_server_fault(code):
        span.set_status(trace.Status(trace.StatusCode.ERROR, code))
