"""telemetry.otlp_endpoint, when unset, follows the standard OpenTelemetry variables (and a
value set in any layer wins over them, here for the export timeout too).

The exporter is given its endpoint, so it never read OTEL_EXPORTER_OTLP_ENDPOINT itself:
a deployment that set only that variable exported to 127.0.0.1:4317, silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.settings import DEFAULT_OTLP_ENDPOINT, load_mesh_config

GENERAL = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"


def endpoint(environ: dict[str, str], path: Path | None = None, **flags: object) -> str:
    return load_mesh_config(path, flags or None, environ).telemetry.otlp_endpoint


def test_default_without_any_variable() -> None:
    assert endpoint({}) == DEFAULT_OTLP_ENDPOINT == "http://127.0.0.1:4317"


def test_the_general_variable_is_read() -> None:
    assert endpoint({GENERAL: "http://collector:4317"}) == "http://collector:4317"


def test_the_traces_variable_comes_before_the_general_one() -> None:
    environ = {GENERAL: "http://general:4317", TRACES: "http://traces:4317"}
    assert endpoint(environ) == "http://traces:4317"
    assert endpoint({TRACES: "http://traces:4317"}) == "http://traces:4317"


def test_an_empty_variable_counts_as_unset() -> None:
    assert endpoint({TRACES: " ", GENERAL: "http://general:4317"}) == "http://general:4317"


# Each OTLP setting the OpenTelemetry variables fill when it is unset: (field, the value a
# layer sets, the variables beside it, what the field then reads).
FILLED_FROM_VARIABLES = [
    (
        "otlp_endpoint",
        "http://mine:4317",
        {GENERAL: "http://general:4317", TRACES: "http://traces:4317"},
        "http://mine:4317",
    ),
    (
        "otlp_export_timeout_s",
        "3",
        {"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "7000"},
        3.0,
    ),
]


@pytest.mark.parametrize("layer", ["file", "env", "flag"])
@pytest.mark.parametrize(
    ("field", "value", "variables", "expected"),
    FILLED_FROM_VARIABLES,
    ids=[f for f, *_ in FILLED_FROM_VARIABLES],
)
def test_the_setting_from_any_layer_wins(
    tmp_path: Path, layer: str, field: str, value: str, variables: dict, expected: object
) -> None:
    environ = dict(variables)
    path = None
    flags: dict[str, object] = {}
    if layer == "file":
        path = tmp_path / "mesh.yaml"
        path.write_text(f"telemetry:\n  {field}: {value}\n")
    elif layer == "env":
        environ[f"MEDIAMESH_TELEMETRY__{field.upper()}"] = value
    else:
        flags[f"telemetry.{field}"] = value
    telemetry = load_mesh_config(path, flags or None, environ).telemetry
    assert getattr(telemetry, field) == expected


def test_the_rest_of_the_telemetry_section_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "mesh.yaml"
    path.write_text("telemetry:\n  traces: otlp\n  log_format: json\n")
    config = load_mesh_config(path, environ={GENERAL: "http://collector:4317"})
    assert config.telemetry.traces == "otlp"
    assert config.telemetry.log_format == "json"
    assert config.telemetry.otlp_endpoint == "http://collector:4317"


def test_the_process_environment_is_read_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TRACES, raising=False)
    monkeypatch.setenv(GENERAL, "http://from-process:4317")
    assert load_mesh_config(None).telemetry.otlp_endpoint == "http://from-process:4317"
