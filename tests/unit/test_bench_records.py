"""Benchmark records: each figure of a new result next to the committed one."""

from __future__ import annotations

from bench.records import comparison_lines, figures


def test_figures_flatten_the_summary_and_skip_booleans() -> None:
    summary = {"a": {"b": 2, "ok": True}, "c": 1.5, "name": "x", "d": None}
    assert figures(summary) == {"a.b": 2.0, "c": 1.5}


def test_each_figure_is_printed_next_to_the_committed_one() -> None:
    new = {"summary": {"echo": {"rps": 1200.0}, "p50_ms": 2.5}}
    old = {"git": {"commit": "0123456789abcdef"}, "summary": {"echo": {"rps": 345.0}}}
    assert comparison_lines("overhead", new, old) == [
        "overhead echo.rps: 1200 (committed 0123456789: 345, +248%)",
        "overhead p50_ms: 2.5 (committed 0123456789: -)",
    ]
    assert (
        comparison_lines("overhead", new, None)[0] == "overhead echo.rps: 1200 (committed none: -)"
    )
