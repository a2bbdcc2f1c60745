"""HTTP `Range` requests on a job's result (RFC 9110 section 14): one byte range at most.

Pure. A header this does not understand is ignored, as the RFC allows: the whole body is sent.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()):
        return None
    if not first:
        return ByteRange(suffix=int(last))
    if last and not last.isdigit():
        return None
    if last and int(last) < int(first):
        return None
    return ByteRange(int(first), int(last) if last else None)
