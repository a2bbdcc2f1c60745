"""HTTP `Range` requests on a job's result (RFC 9110 section 14): one byte range at most.

Pure. A header this does not understand is ignored, as the RFC allows: the whole body is sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One range: `first-`, `first-last` or `-suffix` (RFC 9110 14.1.1), ASCII digits only.
_ONE_RANGE = re.compile(r"(?P<first>[0-9]*)-(?P<last>[0-9]*)")
# Past the end of any body: a Download offset is a uint64, so no artifact reaches 2**64.
BEYOND_ANY_BODY = 2**64


@dataclass(frozen=True)
class ByteRange:
    """`bytes=first-last` (last None: to the end) or, with `suffix`, the last `suffix` bytes."""

    first: int = 0
    last: int | None = None
    suffix: int | None = None

    def bounds(self, total: int) -> tuple[int, int] | None:
        """The first and last byte (inclusive) within `total`, or None if none is inside."""
        if self.suffix is not None:
            if self.suffix == 0 or total == 0:
                return None
            return max(total - self.suffix, 0), total - 1
        if self.first >= total:
            return None
        last = total - 1 if self.last is None else min(self.last, total - 1)
        return self.first, last


def parse_range(header: str | None) -> ByteRange | None:
    """The single byte range `header` asks for; None for no header, several ranges, or one
    this cannot read (the whole body is then the answer)."""
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes":
        return None
    # fullmatch, not str.isdigit: that also takes digits int() refuses ('²') or reads
    # differently ('٣'), and a Range header is ASCII by its grammar.
    found = _ONE_RANGE.fullmatch(spec.strip())
    if found is None:
        return None
    first, last = found["first"], found["last"]
    if not (first or last):
        return None
    if not first:
        return ByteRange(suffix=_position(last))
    if last and _position(last) < _position(first):
        return None
    return ByteRange(_position(first), _position(last) if last else None)


def _position(digits: str) -> int:
    """A byte position or count, at most BEYOND_ANY_BODY: a larger one means the same (past
    every body's end), and int() refuses thousands of digits."""
    if len(digits.lstrip("0")) > len(str(BEYOND_ANY_BODY)):
        return BEYOND_ANY_BODY
    return min(int(digits), BEYOND_ANY_BODY)
