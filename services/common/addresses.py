"""Whether a host:port address names a port that can be dialled.

gRPC takes a port past 65535 modulo 65536 without a word (99999 dials 34463), so an address
mistyped that way reached another service, or none, and the error named the wrong port.
"""

from __future__ import annotations

import re

_PORT_AT_END = re.compile(r":(\d+)$")


def port_problem(address: str, *, zero: bool = False) -> str | None:
    """Why `address` (host:port) cannot be dialled as written, or None: a port past 65535,
    or 0 unless `zero` allows it (a config's address derived from a listener on port 0, which
    only a test's in-process mesh dials). An address without a port is left to gRPC, which
    dials its default."""
    port = _PORT_AT_END.search(address.strip())
    if port is None:
        return None
    number = int(port.group(1))
    if number > 65535 or (number == 0 and not zero):
        return f"{address!r} names port {port.group(1)}; a port is 1 to 65535"
    return None
