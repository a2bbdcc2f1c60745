"""A text log line cannot be split by what a caller sent: line breaks and other control
characters in the message and the fields are escaped; a traceback keeps its own lines."""

from __future__ import annotations

import logging

from mediamesh.common.telemetry import TextFormatter, escape_controls


def formatted(message: str, *args: object, fields: dict | None = None, exc: bool = False) -> str:
    record = logging.LogRecord("mediamesh.gateway", logging.INFO, __file__, 1, message, args, None)
    if fields is not None:
        record.fields = fields
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            record.exc_info = sys.exc_info()
    return TextFormatter("%(asctime)s gateway %(levelname)s %(message)s").format(record)


def test_line_breaks_in_the_message_and_fields_are_escaped():
    forged = "bob\n2026-01-01 00:00:00,000 gateway INFO admin logged in\r"
    line = formatted("request by %s", forged, fields={"end_user": forged, "jobs": ["j1"]})
    assert "\n" not in line and "\r" not in line
    assert line.endswith(
        "request by bob\\n2026-01-01 00:00:00,000 gateway INFO admin logged in\\r "
        "end_user=bob\\n2026-01-01 00:00:00,000 gateway INFO admin logged in\\r jobs=['j1']"
    )


def test_other_control_characters_are_escaped_and_tabs_and_text_are_kept():
    assert escape_controls("a\x1b[31mb\x00\x85\u2028\u2029\tc é") == (
        "a\\x1b[31mb\\x00\\x85\\u2028\\u2029\tc é"
    )


def test_a_traceback_still_follows_on_its_own_lines():
    lines = formatted("failed %s", "x\ny", fields={"job": "j"}, exc=True).split("\n")
    assert lines[0].endswith("failed x\\ny job=j")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"
