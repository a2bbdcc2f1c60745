"""A signed result link's signature never reaches a span (it opens the result without a key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from mediamesh.common import telemetry
from mediamesh.common.settings import TelemetrySettings
from mediamesh.common.span_redaction import redacted_query

SIGNATURE = "97563eacfb7e8d0816fa0d1061f2a9f761870647a8859ab2de9fee01135f5237"


def test_only_secret_keys_are_redacted() -> None:
    assert redacted_query(f"tenant=a&expires=9&signature={SIGNATURE}") == (
        "tenant=a&expires=9&signature=REDACTED"
    )
    assert redacted_query("limit=20&after=x%20y") == "limit=20&after=x%20y"  # untouched


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    providers: list[TracerProvider] = []
    monkeypatch.setattr(trace, "set_tracer_provider", providers.append)
    monkeypatch.setattr(telemetry, "_tracing_enabled", False)
    monkeypatch.setattr(telemetry, "_otlp_exporter", None)
    telemetry.setup_tracing(
        TelemetrySettings(traces="file", trace_file=tmp_path / "spans.jsonl"), "gateway"
    )
    yield providers[0]
    providers[0].shutdown()


def test_a_request_span_keeps_the_link_but_not_its_signature(
    provider: TracerProvider, tmp_path: Path
) -> None:
    app = FastAPI(telemetry={"tracer_provider": provider})

    @app.get("/v1/jobs/{job_id}/result")
    async def result(job_id: str) -> dict[str, str]:
        return {"job_id": job_id}

    with TestClient(app) as client:
        answer = client.get(f"/v1/jobs/j1/result?tenant=alpha&expires=9&signature={SIGNATURE}")
    assert answer.status_code == 200
    provider.force_flush()
    spans = (tmp_path / "spans.jsonl").read_text()
    assert "tenant=alpha&expires=9&signature=REDACTED" in spans
    assert SIGNATURE not in spans
