"""telemetry.otlp_export_timeout_s, when unset, follows the standard OpenTelemetry timeout
variables, in their spec's unit (milliseconds), and reaches the OTLP exporter in its own
(seconds).

The exporter was given a fixed 2 s, so it never read OTEL_EXPORTER_OTLP_TIMEOUT: a deployment
that set it was ignored, silently; and the installed exporter reads these variables as
seconds, so 10000 (10 s to every other OpenTelemetry SDK) would have been 10000 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter
from opentelemetry.sdk.trace import TracerProvider

from mediamesh.cli import services
from mediamesh.cli.main import main
from mediamesh.common import telemetry
from mediamesh.common.settings import (
    DEFAULT_OTLP_EXPORT_TIMEOUT_S,
    ConfigError,
    TelemetrySettings,
    load_mesh_config,
)

GENERAL = "OTEL_EXPORTER_OTLP_TIMEOUT"
TRACES = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"


def timeout_s(environ: dict[str, str], path: Path | None = None, **flags: object) -> float:
    return load_mesh_config(path, flags or None, environ).telemetry.otlp_export_timeout_s


def test_default_without_any_variable() -> None:
    assert timeout_s({}) == DEFAULT_OTLP_EXPORT_TIMEOUT_S == 2.0


def test_the_general_variable_is_read_as_milliseconds() -> None:
    assert timeout_s({GENERAL: "5000"}) == 5.0
    assert timeout_s({GENERAL: " 250.5 "}) == 0.2505


def test_the_traces_variable_comes_before_the_general_one() -> None:
    assert timeout_s({GENERAL: "5000", TRACES: "7000"}) == 7.0
    assert timeout_s({TRACES: "7000"}) == 7.0


def test_an_empty_variable_counts_as_unset() -> None:
    assert timeout_s({TRACES: " ", GENERAL: "5000"}) == 5.0
    assert timeout_s({TRACES: "", GENERAL: ""}) == DEFAULT_OTLP_EXPORT_TIMEOUT_S


def test_the_endpoint_variables_still_apply_beside_it() -> None:
    environ = {GENERAL: "5000", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
    config = load_mesh_config(None, environ=environ)
    assert config.telemetry.otlp_export_timeout_s == 5.0
    assert config.telemetry.otlp_endpoint == "http://collector:4317"


# A value set in any layer wins over the variables: test_otlp_endpoint.py, for both settings.


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "2s",  # a duration string, not a number
        "0",
        "10",  # meant as seconds: 10 ms, under the bound
        "-1000",
        "600001",  # over 60 s
        "nan",
        "inf",
    ],
)
@pytest.mark.parametrize("name", [GENERAL, TRACES])
def test_a_malformed_variable_is_one_line_naming_it(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        timeout_s({name: value})
    message = str(caught.value)
    assert message.startswith(f"env {name}: {value!r} is not a number of milliseconds from ")
    assert "100 to 60000" in message and "\n" not in message


def test_a_malformed_traces_variable_is_not_passed_over_for_the_general_one() -> None:
    with pytest.raises(ConfigError, match=f"^env {TRACES}: "):
        timeout_s({TRACES: "2s", GENERAL: "5000"})


@pytest.mark.parametrize("value", [0.05, 61.0, float("nan")])
def test_the_setting_has_the_same_bounds(value: float) -> None:
    with pytest.raises(ConfigError, match=r"otlp_export_timeout_s"):
        timeout_s({}, **{"telemetry.otlp_export_timeout_s": value})


def test_a_service_refuses_a_malformed_variable_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[object] = []
    monkeypatch.setattr(services, "run_scheduler", lambda *a: started.append(a))
    monkeypatch.setenv(GENERAL, "2s")
    monkeypatch.delenv(TRACES, raising=False)
    assert main(["scheduler"]) == 2
    assert not started
    assert capsys.readouterr().err == (
        f"mediamesh: env {GENERAL}: '2s' is not a number of milliseconds from 100 to 60000 "
        "(the OpenTelemetry unit: 2000 is 2 s)\n"
    )


@pytest.fixture
def tracing_set_up(monkeypatch: pytest.MonkeyPatch):
    """setup_tracing's provider, kept from the process-wide tracer provider (set only once a
    process) and shut down after the test."""
    providers: list[TracerProvider] = []
    monkeypatch.setattr(trace, "set_tracer_provider", providers.append)
    monkeypatch.setattr(telemetry, "_tracing_enabled", False)
    monkeypatch.setattr(telemetry, "_otlp_exporter", None)
    yield providers
    for provider in providers:
        provider.shutdown()


def test_the_exporter_is_given_the_setting_in_seconds(
    tracing_set_up: list[TracerProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    given: dict[str, Any] = {}

    class Recording(trace_exporter.OTLPSpanExporter):
        def __init__(self, **kwargs: Any) -> None:
            given.update(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", Recording)
    settings = TelemetrySettings(traces="otlp", otlp_export_timeout_s=7.5)
    telemetry.setup_tracing(settings, "timeout-test")
    assert given["timeout"] == 7.5


def test_the_variable_in_milliseconds_is_the_installed_exporters_timeout(
    tracing_set_up: list[TracerProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In the process environment too, where the exporter would read it itself, as seconds.
    monkeypatch.setenv(TRACES, "5000")
    monkeypatch.setenv(GENERAL, "9000")
    config = load_mesh_config(None, {"telemetry.traces": "otlp"})
    telemetry.setup_tracing(config.telemetry, "timeout-test")
    exporter = telemetry._otlp_exporter
    assert isinstance(exporter, trace_exporter.OTLPSpanExporter)
    assert exporter._timeout == 5.0


def test_a_span_keeps_every_step_event_of_a_large_batch(
    tracing_set_up: list[TracerProvider], tmp_path: Path
) -> None:
    """A `run batch` span has an event per job and step: OpenTelemetry's default of 128
    events dropped the first steps of any batch beyond that."""
    settings = TelemetrySettings(traces="file", trace_file=tmp_path / "spans.jsonl")
    telemetry.setup_tracing(settings, "events-test")
    (provider,) = tracing_set_up
    span = provider.get_tracer("test").start_span("run batch")
    for step in range(16 * 50):
        span.add_event("step", {"mediamesh.step": step})
    span.end()
    assert len(span.events) == 800  # type: ignore[attr-defined]
    assert span.events[0].attributes == {"mediamesh.step": 0}  # type: ignore[attr-defined]
