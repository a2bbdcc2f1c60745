"""Spans a module makes, recorded in memory for a test: the module's tracer is replaced, so
the process's own provider (and what other tests installed there) is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def recorded_spans(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType
) -> Iterator[InMemorySpanExporter]:
    """For a fixture: `module._tracer` records into the exporter it yields."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(module, "_tracer", provider.get_tracer("test"))
    yield exporter
    provider.shutdown()
