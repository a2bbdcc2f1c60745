"""Numbers as error messages show them: what the caller sent, not float32 noise."""

from __future__ import annotations

import math
import struct


def shown(value: float) -> str:
    """A request's number as an error message shows it. A float that is a float32 (every
    protobuf `float` field, widened to a Python float) is written with the fewest digits
    that read back as that float32, so 0.1 sent shows as 0.1, not 0.10000000149011612;
    any other float as Python writes it, an int as it is."""
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    try:
        as_float32 = _float32(value)
    except OverflowError:
        return repr(value)
    if as_float32 != value:
        return repr(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if _float32(float(text)) == value:
            return repr(float(text))
    return repr(value)


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])
