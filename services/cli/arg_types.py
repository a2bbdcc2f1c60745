"""argparse `type=` functions for the CLI's numeric flags.

A refusal raised here reaches the user as `mediamesh CMD: error: argument --FLAG: must be …`
with exit status 2, before the command starts anything: argparse names the flag, and the
message states the limit.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from mediamesh.common.addresses import port_problem

# A TCP port; 0 takes a free one (as the config's Port).
MAX_PORT = 65535


def bounded(
    kind: type[int] | type[float],
    least: float,
    *,
    above: bool = False,
    most: float | None = None,
) -> Callable[[str], int | float]:
    """A number of `kind` at least `least` (greater than it, with `above`) and, with `most`,
    at most `most`."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{'a whole number' if kind is int else 'a number'} is needed, not {text!r}"
            ) from None
        # NaN compares false with every limit, and an infinite wait or timeout is never
        # meant: either would slip past the checks below or break the call it reaches.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"a finite number is needed, not {text}")
        if most is not None and not least <= value <= most:
            raise argparse.ArgumentTypeError(f"must be from {least:g} to {most:g}, not {text}")
        if value < least or (above and value == least):
            limit = f"greater than {least:g}" if above else f"at least {least:g}"
            raise argparse.ArgumentTypeError(f"must be {limit}, not {text}")
        return value

    return parse


def port(text: str) -> int:
    """A TCP port, 0 (a free one) to 65535."""
    return int(bounded(int, 0, most=MAX_PORT)(text))


def address(text: str) -> str:
    """A host:port to dial, whose port gRPC would not take modulo 65536."""
    problem = port_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text
