"""Range headers on a job's result: one byte range, or the whole body."""

from __future__ import annotations

import pytest

from mediamesh.gateway.http.ranges import ByteRange, parse_range


@pytest.mark.parametrize(
    ("header", "total", "bounds"),
    [
        ("bytes=0-9", 100, (0, 9)),
        ("bytes=90-", 100, (90, 99)),
        ("bytes=90-500", 100, (90, 99)),
        ("bytes=-10", 100, (90, 99)),
        ("bytes=-500", 100, (0, 99)),
        ("bytes=100-", 100, None),
        ("bytes=-0", 100, None),
    ],
)
def test_one_range_within_the_body(header, total, bounds):
    wanted = parse_range(header)
    assert wanted is not None
    assert wanted.bounds(total) == bounds


@pytest.mark.parametrize(
    "header",
    [None, "", "items=0-9", "bytes=0-9,20-29", "bytes=9-0", "bytes=x-", "bytes=-", "bytes"],
)
def test_headers_that_ask_for_no_single_range_mean_the_whole_body(header):
    assert parse_range(header) is None


def test_a_range_is_its_first_and_last_byte():
    assert parse_range("bytes=5-6") == ByteRange(5, 6)
