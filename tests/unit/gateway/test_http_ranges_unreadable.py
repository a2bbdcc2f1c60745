"""Range headers that are not ASCII digits where the grammar wants them mean the whole body,
and positions past any body stay numbers (never an error) that no body reaches."""

from __future__ import annotations

import pytest

from mediamesh.gateway.http.ranges import BEYOND_ANY_BODY, ByteRange, parse_range


@pytest.mark.parametrize(
    "header",
    [
        "bytes=0-\u00b2",  # superscript two: str.isdigit() says yes, int() says no
        "bytes=\u00b2-",
        "bytes=-\u00b2",
        "bytes=\u0663-",  # Arabic-Indic three: int() reads it as 3
        "bytes=\uff11-\uff12",  # fullwidth digits
        "bytes=x-5",
        "bytes=5-x",
        "bytes=--5",
        "bytes=1-2-3",
        "bytes= 1 - 2 ",
        "bytes=+1-2",
    ],
)
def test_anything_but_ascii_digits_is_no_range(header: str) -> None:
    assert parse_range(header) is None


def test_positions_past_any_body_are_capped_not_refused() -> None:
    huge = "9" * 5000  # more digits than int() reads
    assert parse_range(f"bytes={huge}-") == ByteRange(BEYOND_ANY_BODY)
    assert parse_range(f"bytes=0-{huge}") == ByteRange(0, BEYOND_ANY_BODY)
    assert parse_range(f"bytes=-{huge}") == ByteRange(suffix=BEYOND_ANY_BODY)
    assert parse_range(f"bytes={2**64 + 5}-").bounds(100) is None  # type: ignore[union-attr]
    assert parse_range(f"bytes=0-{huge}").bounds(100) == (0, 99)  # type: ignore[union-attr]
    assert parse_range(f"bytes=-{huge}").bounds(100) == (0, 99)  # type: ignore[union-attr]
